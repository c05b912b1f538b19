import jax

jax.config.update("jax_enable_x64", True)
# The tests compile thousands of tiny functions: XLA's optimization passes dominate their cost and
# buy nothing at these sizes (about 15% of the suite's time on 2 cores).
jax.config.update("jax_disable_most_optimizations", True)
