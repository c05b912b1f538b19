"""Block plan for attention over ragged sequences, with no padding in the math.

Each sequence is cut into blocks of ``block`` rows; block ``j`` of sequence ``i`` attends to
every block of sequence ``i`` and to nothing else (``causal``: to its blocks ``<= j``, and
within block ``j`` a query attends to the keys at or before it). The work is a list of (query
block, key block) *pairs*: sum_i ceil(n_i / block)^2 of them (causal: sum_i b_i (b_i + 1) / 2,
``b_i = ceil(n_i / block)``), which is padded to a static bound (from ``max_len``) with dummy
pairs on an empty block, so the shapes stay static under jit while the
lengths change. Per-pair work is dense (``P x heads x block x block`` scores); per-query
statistics are combined across pairs with segment sums, as flash attention combines key tiles.

Layout: ``slot_token[(num_blocks + 1) * block]`` is the row of ``values`` in each block slot
(``total`` for an empty slot: the zero row appended by ``to_blocks``); ``token_slot[total]`` the
slot of each row; ``pair_q``/``pair_k`` the blocks of each pair (``num_blocks`` is the empty
block). Integer arrays only: they are arguments of the attention op, never differentiated.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrules.mechanism import unsharded_along


class Plan(NamedTuple):
    token_slot: jax.Array
    slot_token: jax.Array
    pair_q: jax.Array
    pair_k: jax.Array


def _pairs_of(blocks, causal: bool):
    """Pairs of a sequence of ``blocks`` blocks: all (``b^2``) or the lower triangle."""
    return blocks * (blocks + 1) // 2 if causal else blocks * blocks


def plan_sizes(total: int, batch: int, block: int, max_len: int, chunk: int, causal: bool = False) -> tuple[int, int]:
    """Static ``(num_blocks, num_pairs)`` bounds: each sequence wastes less than one block, and
    with at most ``m = ceil(max_len / block)`` blocks per sequence the pair count is largest
    when the blocks come in runs of ``m`` (the pair count is convex in the blocks); rounded up
    to whole chunks."""
    num_blocks = -(-total // block) + batch
    m = max(1, -(-max_len // block))
    by_runs = (num_blocks // m) * _pairs_of(m, causal) + _pairs_of(num_blocks % m, causal)
    num_pairs = max(1, min(batch * _pairs_of(m, causal), by_runs))
    return num_blocks, -(-num_pairs // chunk) * chunk


def chunk_size(num_pairs_bound: int, heads: int, block: int, budget: int = 1 << 25) -> int:
    """Pairs per scan step: about ``budget`` scores (128 MiB of float32) per step."""
    return int(max(1, min(num_pairs_bound, budget // (max(heads, 1) * block * block))))  # (0 heads: no scores)


def chunked(pair_q, pair_k, chunk: int):
    """The pair lists as scan inputs: (steps, chunk) each."""
    return pair_q.reshape(-1, chunk), pair_k.reshape(-1, chunk)


def _triangle_row(rank):
    """Row ``i`` of the lower-triangle pair number ``rank`` (pairs numbered row by row, row ``i``
    holding ``i + 1``): the largest ``i`` with ``i (i + 1) / 2 <= rank``, from a float square
    root corrected by one step each way (exact for any int32 rank)."""
    i = jnp.floor((jnp.sqrt(8 * rank.astype(jnp.float32) + 1) - 1) / 2).astype(jnp.int32)
    i = jnp.where(i * (i + 1) // 2 > rank, i - 1, i)
    return jnp.where((i + 1) * (i + 2) // 2 <= rank, i + 1, i)


def attention_plan(offsets, total: int, block: int, max_len: int, chunk: int, causal: bool = False) -> Plan:
    """The plan for sequences ``values[offsets[i]:offsets[i + 1]]`` (traceable in ``offsets``);
    ``causal``: only the pairs whose key block is at or before the query block."""
    batch = offsets.shape[0] - 1
    num_blocks, num_pairs = plan_sizes(total, batch, block, max_len, chunk, causal)
    lengths = jnp.diff(offsets)
    blocks_per_seq = (lengths + block - 1) // block
    first_block = jnp.cumsum(blocks_per_seq) - blocks_per_seq
    seq = jnp.repeat(jnp.arange(batch, dtype=jnp.int32), lengths, total_repeat_length=total)
    token_slot = first_block[seq] * block + jnp.arange(total, dtype=jnp.int32) - offsets[seq]
    slot_token = jnp.full(((num_blocks + 1) * block,), total, jnp.int32).at[token_slot].set(
        jnp.arange(total, dtype=jnp.int32)
    )
    pairs_per_seq = _pairs_of(blocks_per_seq, causal)
    pair_end = jnp.cumsum(pairs_per_seq)
    p = jnp.arange(num_pairs, dtype=jnp.int32)
    owner = jnp.minimum(jnp.searchsorted(pair_end, p, side="right"), batch - 1).astype(jnp.int32)
    rank = p - (pair_end - pairs_per_seq)[owner]
    if causal:
        row = _triangle_row(rank)
        col = rank - row * (row + 1) // 2
    else:
        n = jnp.maximum(blocks_per_seq[owner], 1)
        row, col = rank // n, rank % n
    real = p < pair_end[-1]
    pair_q = jnp.where(real, first_block[owner] + row, num_blocks).astype(jnp.int32)
    pair_k = jnp.where(real, first_block[owner] + col, num_blocks).astype(jnp.int32)
    return Plan(token_slot.astype(jnp.int32), slot_token, pair_q, pair_k)


def num_blocks_of(slot_token, block: int) -> int:
    """Blocks in the layout, the empty one included."""
    return slot_token.shape[0] // block


def to_blocks(x, slot_token, block: int):
    """(total, *rest) -> (num_blocks + 1, block, *rest), zeros in empty slots. Tokens sharded over
    devices under an ``Explicit`` mesh are gathered first (the blocks pair tokens of any device;
    sequence-sharded attention is not built)."""
    x = unsharded_along(x, (0,))
    padded = jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])
    return padded[slot_token].reshape(num_blocks_of(slot_token, block), block, *x.shape[1:])  # not -1: rest may be 0


def from_blocks(xb, token_slot):
    """(num_blocks + 1, block, *rest) -> (total, *rest)."""
    return xb.reshape(xb.shape[0] * xb.shape[1], *xb.shape[2:])[token_slot]  # not -1: rest may be 0


def slot_valid(slot_token, total: int, block: int):
    """(num_blocks + 1, block) booleans: which slots hold a row."""
    return (slot_token < total).reshape(-1, block)


def per_pair(stat_b, pair_q):
    """A per-query statistic in blocks (nb, block, heads) -> (P, heads, block, 1)."""
    return jnp.swapaxes(stat_b[pair_q], 1, 2)[..., None]


def combine(x, ids, num_blocks: int):
    """Sum the per-pair ``x`` into its blocks (segment sum over pairs)."""
    return jax.ops.segment_sum(x, ids, num_segments=num_blocks)


def scores(qb, kb, pair_q, pair_k):
    """``Q_blk K_blk^T`` for every pair: (P, heads, block, block)."""
    return jnp.einsum("pqhd,pkhd->phqk", qb[pair_q], kb[pair_k])


def pair_mask(valid, pair_q, pair_k, causal: bool = False):
    """(P, 1, block, block): both the query and the key slot hold a row (``causal``: and the key
    is at or before the query; a pair's blocks belong to one sequence, whose slots are
    consecutive, so slot order is position order)."""
    mask = valid[pair_q][:, :, None] & valid[pair_k][:, None, :]
    if causal:
        block = valid.shape[1]
        offset = jnp.arange(block, dtype=pair_q.dtype)
        q_slot = pair_q[:, None, None] * block + offset[None, :, None]
        k_slot = pair_k[:, None, None] * block + offset[None, None, :]
        mask = mask & (k_slot <= q_slot)
    return mask[:, None]


def probabilities(qb, kb, lse_b, valid, pair_q, pair_k, scale, causal: bool = False):
    """``exp(scale Q K^T - lse)`` per pair (0 outside the sequences and, ``causal``, above the
    diagonal)."""
    s = scale * scores(qb, kb, pair_q, pair_k)
    return jnp.where(pair_mask(valid, pair_q, pair_k, causal), jnp.exp(s - per_pair(lse_b, pair_q)), 0)


def default_block(max_len: int) -> int:
    """Rows per block: the power of two >= the longest sequence, between 16 and 64 (the tile
    a GPU handles well; CPU tests use short sequences)."""
    return int(min(64, max(16, 2 ** math.ceil(math.log2(max(max_len, 1))))))
