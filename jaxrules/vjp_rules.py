"""VJP formulas (reverse mode), one per op, mirroring FunctionsManual.cpp, gathered here.

Signature: ``name_vjp(residuals, cotangent, **static) -> tuple`` with one cotangent (or
``None`` for zero) per array argument. Complex formulas are in JAX's convention, the conjugate
of torch's (``docs/design.md`` §2): each is the transpose of the JVP formula in
``jvp_rules``, and both apply the same factor from ``partials``. Broadcast arguments get
cotangents of the broadcast shape; the mechanism sums them back to the argument's shape.

Each formula is defined beside its op, in the op's family module ``jaxrules/ops/<family>.py``
(primal, residuals, JVP, VJP and ``define_op`` together), where the op names it. This module
defines nothing: it is the import path ``jaxrules.vjp_rules.<name>_vjp`` of the formulas listed
below, with ``complement_adjoint`` (``partials.linalg``) and the ops the normalizations' VJP
formulas call, ``normalize_backward`` and ``rms_norm_backward``. Listing a new op's formulas
here is optional: its family module is the one place that defines them.
"""

from jaxrules.ops.activations import (  # noqa: F401 (re-exported)
    dropout_vjp,
    glu_vjp,
    log_softmax_vjp,
    masked_log_softmax_vjp,
    masked_softmax_vjp,
    pointwise_vjp,
    softmax_vjp,
)
from jaxrules.ops.conv import (  # noqa: F401 (re-exported)
    adaptive_avg_pool_vjp,
    adaptive_max_pool_vjp,
    avg_pool_vjp,
    conv_transpose_vjp,
    convolution_vjp,
    fold_vjp,
    max_pool_vjp,
    unfold_vjp,
)
from jaxrules.ops.elementwise import (  # noqa: F401 (re-exported)
    abs_vjp,
    angle_vjp,
    arctan2_vjp,
    clip_vjp,
    copysign_vjp,
    deg2rad_vjp,
    i1_vjp,
    i1e_vjp,
    log1p_vjp,
    logit_vjp,
    multigammaln_vjp,
    power_scalar_base_vjp,
    power_scalar_exponent_vjp,
    power_vjp,
    rad2deg_vjp,
    sign_vjp,
    sinc_vjp,
    xlogy_vjp,
)
from jaxrules.ops.fft import (  # noqa: F401 (re-exported)
    fft_vjp,
)
from jaxrules.ops.indexing import (  # noqa: F401 (re-exported)
    embedding_vjp,
    scatter_reduce_vjp,
)
from jaxrules.ops.linalg import (  # noqa: F401 (re-exported)
    adjugate_vjp,
    cho_solve_vjp,
    cholesky_inverse_vjp,
    cholesky_vjp,
    det_vjp,
    eig_vjp,
    eigh_vjp,
    eigvals_vjp,
    eigvalsh_vjp,
    expm_vjp,
    householder_product_vjp,
    inv_vjp,
    linear_vjp,
    lstsq_vjp,
    lu_factor_vjp,
    lu_solve_vjp,
    lu_unpack_vjp,
    lu_vjp,
    matmul_vjp,
    ormqr_vjp,
    pinv_vjp,
    qr_vjp,
    slogdet_vjp,
    solve_triangular_vjp,
    solve_vjp,
    svd_vjp,
    svdvals_vjp,
)
from jaxrules.ops.losses import (  # noqa: F401 (re-exported)
    linear_cross_entropy_vjp,
)
from jaxrules.ops.normalization import (  # noqa: F401 (re-exported)
    affine_normalize_eps_vjp,
    affine_normalize_vjp,
    layer_norm_rows_reference_vjp,
    layer_norm_rows_vjp,
    normalize_backward,
    normalize_backward_eps_op,
    normalize_backward_eps_vjp,
    normalize_backward_op,
    normalize_backward_vjp,
    rms_norm_backward,
    rms_norm_backward_eps_op,
    rms_norm_backward_eps_vjp,
    rms_norm_backward_op,
    rms_norm_backward_vjp,
    rms_norm_eps_vjp,
    rms_norm_vjp,
)
from jaxrules.ops.norms import (  # noqa: F401 (re-exported)
    renorm_vjp,
    vector_norm_vjp,
)
from jaxrules.ops.reductions import (  # noqa: F401 (re-exported)
    cumprod_vjp,
    cumsum_vjp,
    logcumsumexp_vjp,
    logsumexp_vjp,
    mean_vjp,
    median_vjp,
    nansum_vjp,
    prod_vjp,
    selection_vjp,
    std_mean_vjp,
    std_vjp,
    sum_vjp,
    value_selection_vjp,
    var_mean_vjp,
    var_vjp,
)
from jaxrules.ops.resampling import (  # noqa: F401 (re-exported)
    affine_grid_vjp,
    grid_sample_vjp,
    interpolate_vjp,
)
from jaxrules.ops.shape import (  # noqa: F401 (re-exported)
    block_diag_vjp,
    concatenate_vjp,
    masked_fill_vjp,
    pad_vjp,
    repeat_vjp,
    split_vjp,
    stack_vjp,
    take_along_axis_vjp,
    take_vjp,
    tile_vjp,
    unstack_vjp,
)
from jaxrules.ops.sorting import (  # noqa: F401 (re-exported)
    cummaxmin_vjp,
    quantile_vjp,
    sort_vjp,
)
from jaxrules.partials.linalg import (  # noqa: F401 (re-exported)
    complement_adjoint,
)
