"""``benchmarks/models.py``: its quick run (tiny configs on the CPU) runs end to end, and the two
sides compute the same models -- the same losses and, in float32, the same gradients (per leaf,
``max |g - g_plain| / max |g_plain|`` under 1e-4) -- a check that does flag a side that computes
something else."""

import functools
import importlib.util
import json
import pathlib
import sys
import types

import jax
import pytest

_spec = importlib.util.spec_from_file_location(
    "benchmarks_models", pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "models.py")
models = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = models  # (dataclasses look their module up there)
_spec.loader.exec_module(models)

GRAD_RTOL = 1e-4


def test_quick_run_both_sides_compute_the_same_models(tmp_path, capsys):
    out = tmp_path / "models.json"
    rows = models.main(["--quick", "--repeats", "2", "--calls", "1", "--workers", "2", "--out", str(out)])
    printed = capsys.readouterr().out
    assert {r["model"] for r in rows} == {"gpt", "resnet", "unet"}
    assert "| model | config | dtype |" in printed
    for r in rows:
        print(f"{r['id']}: loss {r['loss_jaxrules']:.6f} vs {r['loss_plain']:.6f}, "
              f"grad rel diff {r['grad_rel_diff']:.1e}, {r['ms_jaxrules']:.2f} vs {r['ms_plain']:.2f} ms")
        assert r["ms_jaxrules"] > 0 and r["ms_plain"] > 0 and r["speedup"] > 0
        low, high = r["speedup_paired_95"]
        assert 0 < low <= r["speedup_paired"] <= high
        if r["dtype"] == "float32":
            assert r["loss_rel_diff"] < 1e-5, r
            assert r["grad_rel_diff"] < GRAD_RTOL, r
        else:  # bfloat16: rounding in another order, yet the same model
            assert r["loss_rel_diff"] < 1e-2, r
            assert r["grad_rel_diff"] < 0.1, r
    saved = json.loads(out.read_text())
    assert saved["jax_version"] == jax.__version__ and len(saved["rows"]) == len(rows)


def test_the_namespaces_differ_where_expected():
    """The jaxrules side runs jaxrules' ops and the plain side none of them."""
    point = next(p for p in models.points(["gpt"], quick=True) if p.dtype == "float32")
    args = models.abstract_inputs(point)
    jaxprs = {label: str(jax.make_jaxpr(models.step(point, *ns))(*args)) for label, ns in models.SIDES.items()}
    assert "jaxrules" in jaxprs["jaxrules"] and "jaxrules" not in jaxprs["plain JAX"]


@functools.cache
def _tiny_gpt():
    """The float32 quick GPT point, its inputs and the jaxrules side's loss and gradients."""
    point = next(p for p in models.points(["gpt"], quick=True) if p.dtype == "float32")
    args = models.inputs(point)
    return point, args, models.step(point, *models.SIDES["jaxrules"])(*args)


@pytest.mark.parametrize("change", ["gelu_tanh", "layer_norm_eps"])
def test_the_gradient_check_flags_a_different_model(change):
    """A plain side that differs slightly (GELU's tanh form; eps 1e-3 in layer norm) fails the check."""
    point, args, (loss, grads) = _tiny_gpt()
    plain = vars(models.PLAIN_NN).copy()
    if change == "gelu_tanh":
        plain["gelu"] = lambda x, approximate=False: jax.nn.gelu(x, approximate=True)
    else:
        plain["layer_norm"] = lambda x, shape, w, b: models.layer_norm(x, shape, w, b, eps=1e-3)
    loss_plain, grads_plain = models.step(point, jax.numpy, types.SimpleNamespace(**plain))(*args)
    error = models.grad_rel_diff(grads, grads_plain)
    print(f"{change}: loss {float(loss):.6f} vs {float(loss_plain):.6f}, grad rel diff {error:.1e}")
    assert error > 3 * GRAD_RTOL


def test_ablation_swaps_each_piece_into_the_plain_side_alone(capsys):
    """``--ablate``: plain JAX, jaxrules, plain JAX with one jaxrules function at a time and
    jaxrules without one; each swapped side has the function it names from the other side and its
    own others, and traces another program than its own side's."""
    assert [*models.ablation_sides("unet")] == ["plain JAX", "jaxrules", *(f"plain+{n}" for n in models.PIECES["unet"]),
                                               "plain+numpy", *(f"jaxrules-{n}" for n in models.PIECES["unet"])]
    timed = ["jaxrules", "plain+group_norm", "jaxrules-silu", [*models.STATISTICS_SIDES][0]]  # one of each kind
    rows = models.main(["--quick", "--models", "unet", "--ablate", "unet", "--sides", ",".join(timed),
                        "--repeats", "2", "--calls", "1", "--workers", "2"])
    assert [r["side"] for r in rows] == ["plain JAX", *timed]
    assert all(r["ms"] > 0 and r["speedup"] > 0 for r in rows)
    assert "| plain+group_norm |" in capsys.readouterr().out
    point = next(p for p in models.points(["unet"], quick=True))
    args = models.abstract_inputs(point)
    jaxprs = {name: str(jax.make_jaxpr(models.step(point, *ns))(*args))
              for name, ns in models.ablation_sides("unet").items()}
    for name, (_, nn_) in models.ablation_sides("unet").items():
        if name.startswith("plain+") and name != "plain+numpy":
            others = [p for p in models.PIECES["unet"] if f"plain+{p}" != name]
            assert getattr(nn_, name[6:]) is getattr(models.jaxrules.nn, name[6:])
            assert all(getattr(nn_, p) is getattr(models.PLAIN_NN, p) for p in others)
            assert jaxprs[name] != jaxprs["plain JAX"], name  # the swapped function traces another program
        if name.startswith("jaxrules-"):
            others = [p for p in models.PIECES["unet"] if f"jaxrules-{p}" != name]
            assert getattr(nn_, name[9:]) is getattr(models.PLAIN_NN, name[9:])
            assert all(getattr(nn_, p) is getattr(models.jaxrules.nn, p) for p in others)
            assert jaxprs[name] != jaxprs["jaxrules"], name


@pytest.mark.parametrize("direct", [True, False])
def test_the_statistics_sides_trace_one_form_whatever_the_size(direct):
    """Under ``_statistics_forms(direct)`` ``direct_forms`` gives ``direct`` for a small layer norm
    (direct by the rule) and for 16384 rows of 64 MiB (one-pass by the rule); afterwards the rule
    comes back."""
    from jaxrules.partials import normalization

    small = jax.ShapeDtypeStruct((8, 32), jax.numpy.float32)
    many_rows = jax.ShapeDtypeStruct((16384, 1024), jax.numpy.float32)
    rule = normalization.direct_forms
    assert rule(small, (-1,)) and not rule(many_rows, (-1,))
    with models._statistics_forms(direct):
        assert normalization.direct_forms(small, (-1,)) == normalization.direct_forms(many_rows, (-1,)) == direct
    assert normalization.direct_forms is rule


def test_ablation_sides_can_be_chosen():
    """``--sides`` keeps plain JAX and the named sides, in the ablation's order; an unknown label
    is a ValueError that lists the sides."""
    argv = ["--quick", "--models", "unet", "--ablate", "unet", "--repeats", "1", "--calls", "1", "--workers", "2"]
    rows = models.main([*argv, "--sides", "jaxrules+one-pass statistics,jaxrules"])
    assert [r["side"] for r in rows] == ["plain JAX", "jaxrules", "jaxrules+one-pass statistics"]
    with pytest.raises(ValueError, match="unknown sides.*plain\\+group_norm"):
        models.main([*argv, "--sides", "jaxrules+welford"])


@pytest.mark.parametrize("kernel, category", [
    ("loop_convert_multiply_fusion_1", "elementwise fusion"),  # "convert" is no convolution
    ("input_reduce_convert_fusion", "reduction fusion"),
    ("sm90_xmma_fprop_implicit_gemm_bf16", "convolution"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma", "attention (cuDNN)"),
    ("nvjet_sm90_tst_128x160_64x5_2x1_v_bz_NTT", "gemm"),
    ("gemm_fusion_dot_12", "gemm"),
])
def test_profile_categories_of_kernel_names(kernel, category):
    assert models._category(kernel) == category
