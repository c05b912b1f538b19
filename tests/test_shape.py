"""Shape ops on integer and boolean input keep their dtype (as jax.numpy and torch: the ops are
linear, there is nothing to differentiate), and split's cut indices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxrules.numpy as rnp
import jaxrules.scipy.linalg as rsl

X = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
IDX = np.array([0, -1, 5, 2])

CASES = {
    "concatenate": lambda m, x: m.concatenate([x, x], axis=1),
    "concatenate_none": lambda m, x: m.concatenate([x, x], axis=None),
    "concat": lambda m, x: m.concat([x, x]),
    "stack": lambda m, x: m.stack([x, x], axis=-1),
    "take": lambda m, x: m.take(x, IDX, axis=1),
    "take_clip": lambda m, x: m.take(x, IDX, mode="clip"),
    "take_fill_value": lambda m, x: m.take(x, IDX, axis=1, fill_value=7),
    "take_along_axis": lambda m, x: m.take_along_axis(x, np.array([[0, 3, -1, 9]]), axis=1),
    "pad": lambda m, x: m.pad(x, ((1, 2), (0, 1))),
    "pad_constant_values": lambda m, x: m.pad(x, 1, constant_values=3),
    "pad_reflect": lambda m, x: m.pad(x, 2, mode="reflect"),
    "pad_mean": lambda m, x: m.pad(x, 1, mode="mean"),
    "split": lambda m, x: m.split(x, 2, axis=1),
    "array_split": lambda m, x: m.array_split(x, 3, axis=1),
    "unstack": lambda m, x: m.unstack(x, axis=1),
    "tile": lambda m, x: m.tile(x, (2, 1)),
    "repeat": lambda m, x: m.repeat(x, 2, axis=0),
    "repeat_total": lambda m, x: m.repeat(x, np.array([1, 0, 2]), axis=0, total_repeat_length=4),
}


def _leaves(out):
    return list(out) if isinstance(out, list | tuple) else [out]


# a numeric fill value (or a mean) is not a boolean: those cases take integer input only
_NUMERIC_FILL = ("take_fill_value", "pad_constant_values", "pad_mean")


@pytest.mark.parametrize("name, dtype", [(n, d) for n in sorted(CASES) for d in (np.int32, np.bool_)
                                         if not (d is np.bool_ and n in _NUMERIC_FILL)])
def test_integer_and_boolean_input_keep_their_dtype_as_jax_numpy(name, dtype):
    x = (X % 2 == 0) if dtype is np.bool_ else X
    ours, theirs = _leaves(CASES[name](rnp, x)), _leaves(CASES[name](jnp, x))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_integer_input_keeps_its_dtype_as_torch():
    t = torch.tensor(X)
    assert rnp.take(X, np.array([2, 0]), axis=1).dtype == np.int32
    assert torch.index_select(t, 1, torch.tensor([2, 0])).dtype == torch.int32
    np.testing.assert_array_equal(rnp.pad(X, ((0, 0), (1, 2))),
                                  torch.nn.functional.pad(t, (1, 2)).numpy())
    np.testing.assert_array_equal(rnp.pad(X, ((0, 0), (1, 1)), mode="edge"),
                                  torch.nn.functional.pad(t[None].double(), (1, 1), mode="replicate")[0].int().numpy())
    np.testing.assert_array_equal(rsl.block_diag(X, X[:1]), torch.block_diag(t, t[:1]).numpy())


def test_integer_path_under_jit_and_vmap():
    f = jax.jit(lambda x: rnp.pad(rnp.take(x, np.array([1, 0]), axis=0), 1))
    assert f(X).dtype == np.int32
    np.testing.assert_array_equal(jax.vmap(lambda r: rnp.tile(r, 2))(X), np.tile(X, (1, 2)))


def test_mixed_integer_and_float_arrays_are_promoted_and_differentiable():
    w = jnp.ones((3, 4))
    out = rnp.concatenate([X, w], axis=0)
    assert out.dtype == jnp.result_type(X, w)
    grad = jax.grad(lambda w: rnp.concatenate([X, w * 2.0], axis=0).sum())(w)
    np.testing.assert_allclose(grad, 2 * np.ones((3, 4)))


def test_float_path_still_has_the_rules():
    x = jnp.asarray(X, jnp.float32)
    grad = jax.grad(lambda x: rnp.take(x, np.array([0, 0, 3]), axis=1).sum())(x)
    np.testing.assert_allclose(grad, np.tile([2.0, 0.0, 0.0, 1.0], (3, 1)))


def test_split_cut_indices_count_from_the_end_and_must_not_decrease():
    x = np.arange(12.0).reshape(3, 4)
    for ours, numpys in zip(rnp.split(x, [-1], axis=1), np.split(x, [-1], axis=1), strict=True):
        np.testing.assert_array_equal(ours, numpys)
    with pytest.raises(ValueError, match="split: the cut indices must not decrease"):
        rnp.split(x, [3, 1], axis=1)
    with pytest.raises(ValueError, match="array_split: the cut indices must not decrease"):
        rnp.array_split(x, [-1, 1], axis=1)
