"""hlo_tools/programs/attention_kernels.py: which per-block kernel the ring runs (the
shapes cuDNN's flash attention takes, and `auto`'s choice by backend)."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

from hlo_tools.programs import attention_kernels


def test_kernel_choice_rejects_what_cudnn_cannot_run():
  import jax.numpy as jnp

  from hlo_tools.programs import attention_kernels

  with pytest.raises(ValueError, match="bf16/f16"):
    attention_kernels.resolve("cudnn", jnp.float32, 128)
  with pytest.raises(ValueError, match="not in"):
    attention_kernels.resolve("flash", jnp.bfloat16, 128)
  assert attention_kernels.resolve("blocked", jnp.bfloat16, 128) == "blocked"


@pytest.mark.parametrize(
  "dtype,head_dim,fits",
  [
    (jnp.bfloat16, 128, True),
    (jnp.float16, 64, True),
    (jnp.bfloat16, 8, True),
    (jnp.float32, 128, False),  # 16-bit inputs only
    (jnp.bfloat16, 136, False),  # head_dim <= 128
    (jnp.bfloat16, 100, False),  # a multiple of 8
  ],
)
def test_cudnn_fits_16_bit_heads_up_to_128(dtype, head_dim, fits):
  assert attention_kernels.cudnn_fits(dtype, head_dim) is fits


@pytest.mark.parametrize("on_cuda", [True, False])
def test_auto_takes_cudnn_on_cuda_where_it_fits(monkeypatch, on_cuda):
  monkeypatch.setattr(attention_kernels, "_on_cuda", lambda: on_cuda)
  want = "cudnn" if on_cuda else "blocked"
  assert attention_kernels.resolve("auto", jnp.bfloat16, 128) == want
  # What cuDNN cannot run stays blocked on any backend.
  assert attention_kernels.resolve("auto", jnp.float32, 128) == "blocked"
  assert attention_kernels.resolve("auto", jnp.bfloat16, 256) == "blocked"
  # Named explicitly, cuDNN is taken where it fits (the compile is for a GPU).
  assert attention_kernels.resolve("cudnn", jnp.float16, 64) == "cudnn"


@pytest.mark.parametrize(
  "backend,platform_version,cuda",
  [("cpu", "", False), ("gpu", "rocm 6.3.1", False), ("gpu", "cuda 12080", True)],
)
def test_on_cuda_means_nvidia_gpus(monkeypatch, backend, platform_version, cuda):
  # ROCm's backend is named "gpu" too: the client's platform version tells them apart.
  device = SimpleNamespace(client=SimpleNamespace(platform_version=platform_version))
  monkeypatch.setattr(jax, "default_backend", lambda: backend)
  monkeypatch.setattr(jax, "devices", lambda *a: [device])
  assert attention_kernels._on_cuda() is cuda  # pylint: disable=protected-access
