"""Which per-block attention kernel the ring runs, and the cuDNN one.

The ring needs two things from a kernel for one (query block, key block) pair:
the block's output with its row logsumexp (forward), and the block's gradients
given the *global* output and logsumexp of the whole ring (backward). With those
the ring merges blocks by logsumexp and differentiates them exactly, without a
cotangent for the logsumexp (FlashAttention-2's backward uses only the final
output and statistics, so a block's gradients with the global ones are its exact
share of the gradient).

cuDNN's fused flash attention gives both: its forward returns the softmax
statistics (the natural-log logsumexp of the scaled scores, f32, [b, heads, sq])
and its backward primitive takes statistics and output as inputs. jax's public
`jax.nn.dot_product_attention(..., return_residual=True)` rounds the logsumexp
to the output's dtype and its VJP has no input for global statistics, so the
wrappers here call jax's cuDNN module itself; the calls used have the same
signature in jax 0.9.1, 0.10.x and 0.11.x.

On a machine without a GPU (tests, deviceless compiles) `auto` picks the ring's
own blocked online softmax, which runs everywhere.
"""

from types import ModuleType
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

if TYPE_CHECKING:
  from jax._src.cudnn.fused_attention_stablehlo import MaskType

Array = jax.Array

KERNELS = ("auto", "blocked", "cudnn")
_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def cudnn_fits(dtype: DTypeLike, head_dim: int) -> bool:
  """Shapes and dtypes cuDNN's flash attention takes (16-bit inputs, head_dim <= 128)."""
  return (
    any(jnp.dtype(dtype) == jnp.dtype(t) for t in _CUDNN_DTYPES)
    and head_dim % 8 == 0
    and head_dim <= 128
  )


def _on_cuda() -> bool:
  """Whether jax runs on NVIDIA GPUs (a ROCm backend is also named 'gpu')."""
  if jax.default_backend() != "gpu":
    return False
  version = getattr(getattr(jax.devices()[0], "client", None), "platform_version", "")
  return "cuda" in str(version).lower()


def resolve(kernel: str, dtype: DTypeLike, head_dim: int) -> str:
  """The kernel to run: `auto` is cuDNN on a GPU backend when it fits, else blocked."""
  if kernel not in KERNELS:
    raise ValueError(f"kernel {kernel!r} not in {KERNELS}")
  if kernel == "auto":
    return "cudnn" if _on_cuda() and cudnn_fits(dtype, head_dim) else "blocked"
  if kernel == "cudnn" and not cudnn_fits(dtype, head_dim):
    raise ValueError(
      f"cuDNN flash attention needs bf16/f16 and head_dim <= 128 "
      f"(multiple of 8); got {jnp.dtype(dtype)}, {head_dim}"
    )
  return kernel


def _fa() -> ModuleType:
  # jax's own cuDNN attention module (not public API; see the module docstring).
  from jax._src.cudnn import fused_attention_stablehlo as fa  # pylint: disable=import-outside-toplevel

  return fa


def _mask(fa: ModuleType, causal: bool) -> "MaskType":
  mask: MaskType = fa.MaskType.CAUSAL if causal else fa.MaskType.NO_MASK
  return mask


def cudnn_fwd(q: Array, k: Array, v: Array, causal: bool) -> tuple[Array, Array]:
  """q [b, sq, h, d], k/v [b, sk, kvh, d] -> (out [b, sq, h, d] q.dtype, lse [b, h, sq] f32).

  `causal` masks key j > query i (top-left aligned: for blocks at one position).
  """
  fa = _fa()
  out, lse = fa.dot_product_attention(
    q,
    k,
    v,
    scale=float(1.0 / np.sqrt(q.shape[-1])),
    mask_type=_mask(fa, causal),
    qkv_layout="BTNH",
    return_residual=True,
  )
  return out, lse


def cudnn_bwd(
  q: Array, k: Array, v: Array, out: Array, lse: Array, dout: Array, causal: bool
) -> tuple[Array, ...]:
  """Gradients of one block given the global output `out` and logsumexp `lse`.

  out and dout are [b, sq, h, d] in q's dtype, lse [b, h, sq] f32. Returns
  (dq, dk, dv) in the inputs' dtypes.
  """
  fa = _fa()
  unused = jnp.zeros(0, q.dtype)
  grads = fa._dot_product_attention_bwd_p_wrapper.bind(  # pylint: disable=protected-access
    q,
    k,
    v,
    unused,
    unused,
    unused,
    unused,
    unused,
    unused,
    unused,
    lse,
    out,
    dout,
    scale=float(1.0 / np.sqrt(q.shape[-1])),
    seed=42,
    dropout_rate=0.0,
    variadic_args=(False, False),
    mask_type=_mask(fa, causal),
    layout=fa.AttentionLayout.BTNH.value,
    sliding_window_length=None,
  )
  return tuple(grads[:3])
