"""Block plan for attention over ragged sequences, with no padding in the math.

Each sequence is cut into blocks of ``block`` rows; block ``j`` of sequence ``i`` attends to
every block of sequence ``i`` and to nothing else. The work is a list of (query block, key
block) *pairs*: sum_i ceil(n_i / block)^2 of them, which is padded to a static bound (from
``max_len``) with dummy pairs on an empty block, so the shapes stay static under jit while the
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


class Plan(NamedTuple):
    token_slot: jax.Array
    slot_token: jax.Array
    pair_q: jax.Array
    pair_k: jax.Array


def plan_sizes(total: int, batch: int, block: int, max_len: int, chunk: int) -> tuple[int, int]:
    """Static ``(num_blocks, num_pairs)`` bounds: each sequence wastes less than one block, and
    with at most ``m = ceil(max_len / block)`` blocks per sequence the pair count is largest
    when the blocks come in runs of ``m``; rounded up to whole chunks."""
    num_blocks = -(-total // block) + batch
    m = max(1, -(-max_len // block))
    by_runs = (num_blocks // m) * m * m + (num_blocks % m) ** 2
    num_pairs = max(1, min(batch * m * m, by_runs))
    return num_blocks, -(-num_pairs // chunk) * chunk


def chunk_size(num_pairs_bound: int, heads: int, block: int, budget: int = 1 << 25) -> int:
    """Pairs per scan step: about ``budget`` scores (128 MiB of float32) per step."""
    return int(max(1, min(num_pairs_bound, budget // (heads * block * block))))


def chunked(pair_q, pair_k, chunk: int):
    """The pair lists as scan inputs: (steps, chunk) each."""
    return pair_q.reshape(-1, chunk), pair_k.reshape(-1, chunk)


def attention_plan(offsets, total: int, block: int, max_len: int, chunk: int) -> Plan:
    """The plan for sequences ``values[offsets[i]:offsets[i + 1]]`` (traceable in ``offsets``)."""
    batch = offsets.shape[0] - 1
    num_blocks, num_pairs = plan_sizes(total, batch, block, max_len, chunk)
    lengths = jnp.diff(offsets)
    blocks_per_seq = (lengths + block - 1) // block
    first_block = jnp.cumsum(blocks_per_seq) - blocks_per_seq
    seq = jnp.repeat(jnp.arange(batch, dtype=jnp.int32), lengths, total_repeat_length=total)
    token_slot = first_block[seq] * block + jnp.arange(total, dtype=jnp.int32) - offsets[seq]
    slot_token = jnp.full(((num_blocks + 1) * block,), total, jnp.int32).at[token_slot].set(
        jnp.arange(total, dtype=jnp.int32)
    )
    pairs_per_seq = blocks_per_seq * blocks_per_seq
    pair_end = jnp.cumsum(pairs_per_seq)
    p = jnp.arange(num_pairs, dtype=jnp.int32)
    owner = jnp.minimum(jnp.searchsorted(pair_end, p, side="right"), batch - 1).astype(jnp.int32)
    rank = p - (pair_end - pairs_per_seq)[owner]
    n = jnp.maximum(blocks_per_seq[owner], 1)
    real = p < pair_end[-1]
    pair_q = jnp.where(real, first_block[owner] + rank // n, num_blocks).astype(jnp.int32)
    pair_k = jnp.where(real, first_block[owner] + rank % n, num_blocks).astype(jnp.int32)
    return Plan(token_slot.astype(jnp.int32), slot_token, pair_q, pair_k)


def num_blocks_of(slot_token, block: int) -> int:
    """Blocks in the layout, the empty one included."""
    return slot_token.shape[0] // block


def to_blocks(x, slot_token, block: int):
    """(total, *rest) -> (num_blocks + 1, block, *rest), zeros in empty slots."""
    padded = jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])
    return padded[slot_token].reshape(-1, block, *x.shape[1:])


def from_blocks(xb, token_slot):
    """(num_blocks + 1, block, *rest) -> (total, *rest)."""
    return xb.reshape(-1, *xb.shape[2:])[token_slot]


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


def pair_mask(valid, pair_q, pair_k):
    """(P, 1, block, block): both the query and the key slot hold a row."""
    return (valid[pair_q][:, :, None] & valid[pair_k][:, None, :])[:, None]


def probabilities(qb, kb, lse_b, valid, pair_q, pair_k, scale):
    """``exp(scale Q K^T - lse)`` per pair (0 outside the sequences)."""
    s = scale * scores(qb, kb, pair_q, pair_k)
    return jnp.where(pair_mask(valid, pair_q, pair_k), jnp.exp(s - per_pair(lse_b, pair_q)), 0)


def default_block(max_len: int) -> int:
    """Rows per block: the power of two >= the longest sequence, between 16 and 64 (the tile
    a GPU handles well; CPU tests use short sequences)."""
    return int(min(64, max(16, 2 ** math.ceil(math.log2(max(max_len, 1))))))
