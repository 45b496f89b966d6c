// Note [Dropout on the CPU]. On a GPU, aten::dropout runs as one op below
// Autograd, native_dropout (a fresh output and mask), which a plan re-runs
// with its generator's state (Note [RNG replay] in rng_replay.h). On the CPU,
// PyTorch's composite kernel decomposes it into aten::empty_like,
// aten::bernoulli_ and aten::div_ (the mask, built in place: none is
// recomputable) and aten::mul. So while a session intercepts a step (the
// fallback's key is in the thread's include set, Note [Op interception]), the
// AutogradCPU kernel below builds the mask with one op,
// hyperoffload::dropout_noise, that runs the same three ops inside (the same
// bytes and the same draws from the generator) and returns a fresh tensor the
// plan may re-run; the output is the same aten::mul. Anywhere else (no session,
// the TorchDispatchMode path, eval mode, p outside (0, 1)) it
// calls PyTorch's own composite kernel, at::native::dropout, so eager results
// are unchanged.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/dropout_native.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>
#include <torch/version.h>

namespace hyperoffload::python {
namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)

// The mask of _dropout_impl (ATen/native/Dropout.cpp): noise ~ Bernoulli(1-p), / (1-p).
at::Tensor dropout_noise(const at::Tensor& self, double p) {
  at::Tensor noise = at::empty_like(self);
  noise.bernoulli_(1 - p);
  noise.div_(1 - p);
  return noise;
}

at::Tensor dropout_autograd_cpu(const at::Tensor& input, double p, bool train) {
  const bool intercepted = c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Fake);
  if (!intercepted || !train || !(p > 0.0 && p < 1.0) || input.numel() == 0) {
    return at::native::dropout(input, p, train);
  }
  static const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, double)> op =
      c10::Dispatcher::singleton().findSchemaOrThrow("hyperoffload::dropout_noise", "").typed<at::Tensor(
          const at::Tensor&, double)>();
  at::Tensor noise;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // the mask has no gradient
    noise = op.call(input, p);
  }
  return input * noise;
}

TORCH_LIBRARY(hyperoffload, m) {
  m.def("dropout_noise(Tensor self, float p) -> Tensor", {at::Tag::nondeterministic_seeded});
}

TORCH_LIBRARY_IMPL(hyperoffload, CompositeExplicitAutograd, m) { m.impl("dropout_noise", &dropout_noise); }

TORCH_LIBRARY_IMPL(aten, AutogradCPU, m) { m.impl("dropout", &dropout_autograd_cpu); }

#endif

}  // namespace
}  // namespace hyperoffload::python
