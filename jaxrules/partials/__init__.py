"""Partial derivatives shared by the JVP formulas (``jvp_rules``) and the VJP formulas
(``vjp_rules``): each helper computes, from the residuals, the factor that both formulas apply
(one to a tangent, the other to a cotangent), so the two formulas cannot drift apart.

Every helper is branch-free (masks, not ``if``) so it works under jit and vmap, and uses the
double-``where`` guard so that JAX's derivative of the helper (second order) has no NaN at the
masked points.

One module per family, mirroring ``jaxrules.ops``: ``elementwise`` (guards and elementwise
factors), ``reductions``, ``normalization``, ``activations``, ``losses``, ``linalg``, ``fft``,
``indexing``, ``conv`` (convolution and pooling), ``sorting``. This package exports every public
helper, so formulas write ``P.name``.
"""

from jaxrules.checking import runtime_check  # noqa: F401 (re-exported: the formulas call P.runtime_check)
from jaxrules.partials.activations import (  # noqa: F401
    elu_derivatives,
    gelu_derivative,
    hardsigmoid_derivative,
    hardswish_derivative,
    log_sigmoid_derivative,
    mish_derivative,
    silu_derivative,
    softplus_derivatives,
)
from jaxrules.partials.conv import (  # noqa: F401
    adaptive_avg_pool,
    adaptive_avg_pool_transpose,
    adaptive_windows,
    avg_pool,
    avg_pool_divisor,
    avg_pool_transpose,
    bias_view,
    combine_windows,
    conv,
    conv_input_grad,
    conv_transpose,
    conv_weight_grad,
    fold,
    pool_flat_gather,
    pool_flat_scatter,
    unfold,
    window_element,
    window_place,
    window_positions,
    window_select,
    window_slices,
    window_slices_transpose,
    window_sum,
    window_sum_transpose,
)
from jaxrules.partials.elementwise import (  # noqa: F401
    abs2_reciprocal,
    arctan2_factors,
    clip_masks,
    copysign_factor,
    expand_reduced,
    i1_factor,
    i1e_factor,
    logit_factor,
    multigammaln_factor,
    pow_base_factor,
    pow_exponent_factor,
    pow_scalar_exponent_factor,
    reduced_size,
    safe_reciprocal,
    sgn,
    sgn_parts,
    sinc_derivative,
    xlogy_factors,
)
from jaxrules.partials.fft import (  # noqa: F401
    fft_apply,
    hermitian_weights,
    resize,
)
from jaxrules.partials.indexing import (  # noqa: F401
    embedding_row_weights,
    repeat_along,
    scatter_add,
    scatter_coords,
    scatter_prod_weights,
    scatter_reduce_weights,
    scattered_mask,
    segment_products_of_others,
    sum_repeats,
    zeros_sharded_like,
)
from jaxrules.partials.linalg import (  # noqa: F401
    apply_reflector,
    band,
    check_gauge,
    cho_solve,
    diag_embed,
    diagonal,
    gap_reciprocal,
    half_diagonal,
    herm,
    lu_adjoint,
    lu_factor,
    lu_parts,
    lu_solve,
    lu_tangent,
    matmul,
    matmul_nt,
    matmul_tn,
    mH,
    mT,
    pack_lu,
    pair_products,
    permutation_rows,
    permute_rows,
    pinv_adjoint,
    pinv_tangent,
    reflector,
    reflector_sequence,
    tri_solve,
    unpack_lu,
    unpermute_rows,
)
from jaxrules.partials.losses import (  # noqa: F401
    bce_derivatives,
    bce_with_logits_derivatives,
    hinge_embedding_derivatives,
    huber_derivatives,
    kl_div_derivatives,
    margin_ranking_derivatives,
    mse_derivatives,
    poisson_nll_derivatives,
    smooth_l1_derivatives,
    soft_margin_derivatives,
)
from jaxrules.partials.normalization import (  # noqa: F401
    affine_norm_backward,
    channel_rows,
    group_mean,
    groups_first,
    groups_last,
    masked_softmax_parts,
    norm_projection,
    norm_projection_eps_partial,
    norm_stats,
    rms_projection,
    rms_projection_eps_partial,
    rms_rstd,
    rows_to_samples,
    softmax_parts,
    stat_dtype,
    welford_moments,
)
from jaxrules.partials.reductions import (  # noqa: F401
    even_weights,
    exclusive_cumprod,
    half_reciprocal,
    linear_recurrence,
    linear_recurrence_transpose,
    logcumsumexp_coefficients,
    logsumexp_parts,
    logsumexp_weights,
    max_or_neg_inf,
    median_weights,
    prod_of_others,
    real_inner,
    renorm_scale,
    var_scale,
    vector_norm_direction,
)
from jaxrules.partials.sorting import (  # noqa: F401
    QUANTILE_METHODS,
    cummaxmin_select,
    lerp_selected,
    quantile_selection,
    sort_permutation,
)

