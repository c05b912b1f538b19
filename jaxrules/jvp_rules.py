"""JVP formulas (forward mode), one per op, mirroring FunctionsManual.cpp, gathered here.

Signature: ``name_jvp(residuals, *tangents, **static) -> output tangent``. A tangent is ``None``
where it is zero. Each formula is linear in the tangents. The partial derivatives they apply
live in ``partials`` and are shared with the VJP formulas in ``vjp_rules``.

Each formula is defined beside its op, in the op's family module ``jaxrules/ops/<family>.py``
(primal, residuals, JVP, VJP and ``define_op`` together), where the op names it. This module
defines nothing: it is the import path ``jaxrules.jvp_rules.<name>_jvp`` of the formulas listed
below, with ``complement_tangent``, the building block of svd's and qr's formulas in
``partials.linalg``. Listing a new op's formulas here is optional: its family module is the one
place that defines them.
"""

from jaxrules.ops.activations import (  # noqa: F401 (re-exported)
    dropout_jvp,
    glu_jvp,
    log_softmax_jvp,
    masked_log_softmax_jvp,
    masked_softmax_jvp,
    pointwise_jvp,
    softmax_jvp,
)
from jaxrules.ops.conv import (  # noqa: F401 (re-exported)
    adaptive_avg_pool_jvp,
    adaptive_max_pool_jvp,
    avg_pool_jvp,
    conv_transpose_jvp,
    convolution_jvp,
    fold_jvp,
    max_pool_jvp,
    unfold_jvp,
)
from jaxrules.ops.elementwise import (  # noqa: F401 (re-exported)
    abs_jvp,
    angle_jvp,
    arctan2_jvp,
    clip_jvp,
    copysign_jvp,
    deg2rad_jvp,
    i1_jvp,
    i1e_jvp,
    log1p_jvp,
    logit_jvp,
    multigammaln_jvp,
    power_jvp,
    power_scalar_base_jvp,
    power_scalar_exponent_jvp,
    rad2deg_jvp,
    sign_jvp,
    sinc_jvp,
    xlogy_jvp,
)
from jaxrules.ops.fft import (  # noqa: F401 (re-exported)
    fft_jvp,
)
from jaxrules.ops.indexing import (  # noqa: F401 (re-exported)
    embedding_jvp,
    scatter_reduce_jvp,
)
from jaxrules.ops.linalg import (  # noqa: F401 (re-exported)
    adjugate_jvp,
    cho_solve_jvp,
    cholesky_inverse_jvp,
    cholesky_jvp,
    det_jvp,
    eig_jvp,
    eigh_jvp,
    eigvals_jvp,
    eigvalsh_jvp,
    expm_jvp,
    householder_product_jvp,
    inv_jvp,
    linear_jvp,
    lstsq_jvp,
    lu_factor_jvp,
    lu_jvp,
    lu_solve_jvp,
    lu_unpack_jvp,
    matmul_jvp,
    ormqr_jvp,
    pinv_jvp,
    qr_jvp,
    slogdet_jvp,
    solve_jvp,
    solve_triangular_jvp,
    svd_jvp,
    svdvals_jvp,
)
from jaxrules.ops.losses import (  # noqa: F401 (re-exported)
    linear_cross_entropy_jvp,
)
from jaxrules.ops.normalization import (  # noqa: F401 (re-exported)
    affine_normalize_eps_jvp,
    affine_normalize_jvp,
    layer_norm_rows_jvp,
    normalize_backward_eps_jvp,
    normalize_backward_jvp,
    rms_norm_backward_eps_jvp,
    rms_norm_backward_jvp,
    rms_norm_eps_jvp,
    rms_norm_jvp,
)
from jaxrules.ops.norms import (  # noqa: F401 (re-exported)
    renorm_jvp,
    vector_norm_jvp,
)
from jaxrules.ops.reductions import (  # noqa: F401 (re-exported)
    cumprod_jvp,
    cumsum_jvp,
    logcumsumexp_jvp,
    logsumexp_jvp,
    mean_jvp,
    median_jvp,
    nansum_jvp,
    prod_jvp,
    selection_jvp,
    std_jvp,
    std_mean_jvp,
    sum_jvp,
    value_selection_jvp,
    var_jvp,
    var_mean_jvp,
)
from jaxrules.ops.resampling import (  # noqa: F401 (re-exported)
    affine_grid_jvp,
    grid_sample_jvp,
    interpolate_jvp,
)
from jaxrules.ops.shape import (  # noqa: F401 (re-exported)
    block_diag_jvp,
    concatenate_jvp,
    masked_fill_jvp,
    pad_jvp,
    repeat_jvp,
    split_jvp,
    stack_jvp,
    take_along_axis_jvp,
    take_jvp,
    tile_jvp,
    unstack_jvp,
)
from jaxrules.ops.sorting import (  # noqa: F401 (re-exported)
    cummaxmin_jvp,
    quantile_jvp,
    sort_jvp,
)
from jaxrules.partials.linalg import (  # noqa: F401 (re-exported)
    complement_tangent,
)
