import logging, sys, re
sys.path.insert(0, "tests")
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
print("== 1: eager vjp compiles", jax.devices())
from test_mechanism import _FIVE_PRIMITIVES
x = jnp.array([[0.5, -1.0, 2.0, 0.25, 3.0, -0.75, 1.5], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]])
jax.block_until_ready(x); jax.clear_caches()
names = []
class H(logging.Handler):
    def emit(self, r):
        m = re.search(r"Compiling (jit\([^)]*\)) with global shapes and types (.*?)\. Arg", r.getMessage())
        if m: names.append(m.group(1) + " " + m.group(2)[:120])
logging.getLogger("jax._src.interpreters.pxla").addHandler(H())
jax.config.update("jax_log_compiles", True)
jax.block_until_ready(jax.vjp(_FIVE_PRIMITIVES, x)[1](x))
jax.config.update("jax_log_compiles", False)
print("\n".join(names))
print("== 2: plain jnp.linalg.norm(ord=1) float64 on GPU")
xn = np.arange(12.0).reshape(3, 4) * 0.37 - 1.3 + 0.01 * np.arange(12.0).reshape(3, 4) ** 2
t = np.random.default_rng(0).standard_normal((3, 4))
f = lambda a: jnp.linalg.norm(a, ord=1)
print("value", f(xn), "jvp", jax.jvp(f, (xn,), (t,))[1], "vjp", jax.vjp(f, xn)[1](1.0)[0].ravel())
g = lambda a: jnp.max(jnp.sum(jnp.abs(a), axis=0))
print("max(sum(abs)) jvp", jax.jvp(g, (xn,), (t,))[1], "jit", jax.jit(lambda a, v: jax.jvp(g, (a,), (v,))[1])(xn, t))
print("on cpu", jax.jit(lambda a, v: jax.jvp(f, (a,), (v,))[1], device=jax.devices("cpu")[0])(xn, t) if False else "")
print("== 3: strict promotion nested sdpa pallas")
from jaxrules import registry, testing
registry.load_records()
rec = registry.get("nested.scaled_dot_product_attention[pallas]")
lab, sample = [(l, s) for l, s in testing._each_sample(rec, ("float32",))][0]
sample = testing._strict_sample(rec, sample, "float32")
fn, args = testing._closure(rec, sample)
rng = np.random.default_rng(1)
tt = [testing._like(rng, a) for a in args]
c = jax.tree.map(lambda o: testing._like(rng, o), jax.eval_shape(fn, *args))
batch = ([testing._batch(a) for a in args], [testing._batch(v) for v in tt], jax.tree.map(testing._batch, c))
p1 = testing._strict_program(fn)
h1 = p1.lower(args, tt, c, *batch).compile().as_text()
e = p1(args, tt, c, *batch)
with testing.strict_promotion():
    p2 = testing._strict_program(fn)
    h2 = p2.lower(args, tt, c, *batch).compile().as_text()
    g2 = p2(args, tt, c, *batch)
strip = lambda h: re.sub(r", metadata=\{[^}]*\}", "", h)
print("same optimized HLO:", strip(h1) == strip(h2), len(h1), len(h2))
import difflib
d = [l for l in difflib.unified_diff(strip(h1).splitlines(), strip(h2).splitlines(), lineterm="", n=0) if l[:1] in "+-"]
print("\n".join(d[:30]))
for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(e)):
    a, b = np.asarray(a), np.asarray(b)
    if a.size and np.issubdtype(a.dtype, np.floating):
        diff = np.abs(a - b); print(a.dtype, a.shape, "max abs", diff.max(), "ulps", (diff / np.spacing(np.abs(b).astype(a.dtype))).max())
