"""A small GPT-style language model written the way JAX users write one, with jaxrules swapped in.

The only jaxrules-specific lines are the two imports below: ``jaxrules.numpy`` and ``jaxrules.nn``
are drop-in namespaces for ``jax.numpy`` and ``jax.nn`` (names jaxrules has no rule for are JAX's
own objects), plus torch's ``layer_norm`` and ``scaled_dot_product_attention``, which ``jax.nn`` lacks (or
spells differently), and jaxrules' fused head ``linear_cross_entropy`` (torch's
``cross_entropy(linear(x, weight), target)`` without holding the logits).
``tests/test_examples.py`` loads this file a second time with ``jax.numpy`` / ``jax.nn`` (and plain
JAX versions of those two torch functions) in place of the two namespaces and checks that the
gradients agree.

Model: token + position embedding, pre-norm transformer blocks (layer_norm, causal multi-head
self-attention with torch's ``scaled_dot_product_attention(..., is_causal=True)``, GELU MLP), a
final layer_norm and a linear head; loss: the next token's cross-entropy through the head, fused
(``nn.linear_cross_entropy``: the logits, tokens x vocabulary, are never held whole). The model is an
Equinox module, trained with optax's Adam on a synthetic task (each sequence counts up from a
random start in a random step, modulo the vocabulary: the next token follows from the two before
it).

Run it: ``python examples/gpt.py`` (CPU, a few seconds).
"""

import functools

import equinox as eqx
import jax
import optax

import jaxrules.nn as nn
import jaxrules.numpy as jnp

VOCAB, SEQ_LEN, D_MODEL, N_HEADS, N_LAYERS = 16, 16, 32, 2, 2


def _normal(key, shape, scale=0.02):
    return scale * jax.random.normal(key, shape, jnp.float32)


class Block(eqx.Module):
    ln1_w: jax.Array
    ln1_b: jax.Array
    w_qkv: jax.Array
    b_qkv: jax.Array
    w_out: jax.Array
    b_out: jax.Array
    ln2_w: jax.Array
    ln2_b: jax.Array
    w_fc: jax.Array
    b_fc: jax.Array
    w_proj: jax.Array
    b_proj: jax.Array
    n_heads: int = eqx.field(static=True)

    def __init__(self, d_model, n_heads, key):
        k_qkv, k_out, k_fc, k_proj = jax.random.split(key, 4)
        self.ln1_w, self.ln1_b = jnp.ones(d_model, jnp.float32), jnp.zeros(d_model, jnp.float32)
        self.w_qkv, self.b_qkv = _normal(k_qkv, (d_model, 3 * d_model)), jnp.zeros(3 * d_model, jnp.float32)
        self.w_out, self.b_out = _normal(k_out, (d_model, d_model)), jnp.zeros(d_model, jnp.float32)
        self.ln2_w, self.ln2_b = jnp.ones(d_model, jnp.float32), jnp.zeros(d_model, jnp.float32)
        self.w_fc, self.b_fc = _normal(k_fc, (d_model, 4 * d_model)), jnp.zeros(4 * d_model, jnp.float32)
        self.w_proj, self.b_proj = _normal(k_proj, (4 * d_model, d_model)), jnp.zeros(d_model, jnp.float32)
        self.n_heads = n_heads

    def attention(self, x):
        batch, seq, d_model = x.shape
        head = d_model // self.n_heads
        qkv = jnp.matmul(x, self.w_qkv) + self.b_qkv
        # (batch, seq, 3 * d_model) -> three (batch, heads, seq, head)
        q, k, v = (jnp.swapaxes(t.reshape(batch, seq, self.n_heads, head), 1, 2) for t in jnp.split(qkv, 3, axis=-1))
        y = nn.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = jnp.swapaxes(y, 1, 2).reshape(batch, seq, d_model)
        return jnp.matmul(y, self.w_out) + self.b_out

    def __call__(self, x):
        d_model = x.shape[-1]
        x = x + self.attention(nn.layer_norm(x, (d_model,), self.ln1_w, self.ln1_b))
        h = nn.layer_norm(x, (d_model,), self.ln2_w, self.ln2_b)
        return x + jnp.matmul(nn.gelu(jnp.matmul(h, self.w_fc) + self.b_fc), self.w_proj) + self.b_proj


class GPT(eqx.Module):
    tok_emb: jax.Array
    pos_emb: jax.Array
    blocks: list
    ln_f_w: jax.Array
    ln_f_b: jax.Array
    head: jax.Array

    def __init__(self, key, vocab=VOCAB, seq_len=SEQ_LEN, d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS):
        k_tok, k_pos, k_head, *k_blocks = jax.random.split(key, 3 + n_layers)
        self.tok_emb = _normal(k_tok, (vocab, d_model))
        self.pos_emb = _normal(k_pos, (seq_len, d_model))
        self.blocks = [Block(d_model, n_heads, k) for k in k_blocks]
        self.ln_f_w, self.ln_f_b = jnp.ones(d_model, jnp.float32), jnp.zeros(d_model, jnp.float32)
        self.head = _normal(k_head, (vocab, d_model))  # (vocabulary, features), as torch's Linear

    def features(self, tokens):
        """tokens: (batch, seq) int -> the head's input (batch, seq, d_model)."""
        x = jnp.take(self.tok_emb, tokens, axis=0) + self.pos_emb[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return nn.layer_norm(x, (x.shape[-1],), self.ln_f_w, self.ln_f_b)

    def __call__(self, tokens):
        """tokens: (batch, seq) int -> logits (batch, seq, vocab)."""
        return jnp.matmul(self.features(tokens), self.head.T)


def loss_fn(model, tokens):
    """Mean next-token cross-entropy of a (batch, seq + 1) batch of token ids, through the fused
    head (no (batch, seq, vocab) logits)."""
    return nn.linear_cross_entropy(model.features(tokens[:, :-1]), model.head, tokens[:, 1:])


@functools.partial(jax.jit, static_argnames=("batch", "seq_len", "vocab"))
def make_batch(key, batch=16, seq_len=SEQ_LEN, vocab=VOCAB):
    """Sequences ``(start + step * t) % vocab`` of seq_len + 1 tokens (inputs and shifted targets)."""
    k_start, k_step = jax.random.split(key)
    start = jax.random.randint(k_start, (batch, 1), 0, vocab)
    step = jax.random.randint(k_step, (batch, 1), 1, 4)
    return (start + step * jnp.arange(seq_len + 1)) % vocab


def train(steps=60, seed=0, learning_rate=1e-2):
    """Train from scratch; returns (model, list of losses)."""
    key_model, key_data = jax.random.split(jax.random.PRNGKey(seed))
    model = GPT(key_model)
    optimizer = optax.adam(learning_rate)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def step(model, opt_state, tokens):
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    losses = []
    for key in jax.random.split(key_data, steps):
        model, opt_state, loss = step(model, opt_state, make_batch(key))
        losses.append(float(loss))
    return model, losses


if __name__ == "__main__":
    _, losses = train()
    for i in range(0, len(losses), 10):
        print(f"step {i:3d}  loss {losses[i]:.4f}")
    print(f"step {len(losses) - 1:3d}  loss {losses[-1]:.4f}")
