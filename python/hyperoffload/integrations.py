"""Training frameworks with every training step under one OffloadSession.

::

    from hyperoffload.integrations import OffloadTrainer, OffloadCallback

    # Hugging Face transformers: a Trainer whose training_step (forward and backward) is one session step.
    trainer = OffloadTrainer(model=model, args=args, train_dataset=data, data_collator=collator,
                             offload_config=ho.OffloadConfig(max_resident_activation_mib=512))
    trainer.train()

    # PyTorch Lightning: a Callback that opens the session's step before the
    # training step and closes it after backward, before the optimizer updates.
    trainer = lightning.pytorch.Trainer(callbacks=[OffloadCallback(ho.OffloadConfig(...))], ...)

Neither changes what the framework computes: the loss scaling, gradient
accumulation, clipping, optimizer and scheduler steps are the framework's own,
so a run is bit-identical to the same run without the integration (tested in
python/tests/test_integrations.py). One session serves the whole run; it keeps a
plan per step program (docs/PYTHON.md, "Training loops"), so batches padded to
different lengths, the last small batch and the micro-batches of a gradient
accumulation each replay their own plan.

``OffloadTrainer`` and ``OffloadCallback`` import ``transformers`` and
``lightning`` only when first used: importing this module needs neither.
See docs/PYTHON.md, "Integrations".
"""

from __future__ import annotations

from typing import Any, Optional

from .config import OffloadConfig
from .errors import HyperoffloadError
from .session import OffloadSession

__all__ = ["OffloadCallback", "OffloadTrainer", "OffloadTrainerMixin"]


def _session_from(session: Optional[OffloadSession], config: Optional[OffloadConfig], owner: str) -> OffloadSession:
    """The session an integration runs its steps in: the one given, or a new one from `config`."""
    if session is not None and config is not None:
        raise TypeError(f"{owner}: give offload_session or offload_config, not both")
    if session is not None:
        if not isinstance(session, OffloadSession):
            raise TypeError(f"{owner}: offload_session must be a hyperoffload.OffloadSession, "
                            f"not {type(session).__name__}")
        return session
    if config is not None and not isinstance(config, OffloadConfig):
        raise TypeError(f"{owner}: offload_config must be a hyperoffload.OffloadConfig, not {type(config).__name__}")
    return OffloadSession(config)


class OffloadTrainerMixin:
    """Runs each ``training_step`` of a ``transformers.Trainer`` (subclass) as one session step.

    Put it first among the bases: ``class MyTrainer(OffloadTrainerMixin, MyBaseTrainer)``
    (``OffloadTrainer`` is the mixin on ``transformers.Trainer``). It adds two
    keyword arguments to the Trainer's constructor, at most one of them given:

    * ``offload_session``: an ``OffloadSession`` to run the steps in (yours to close);
    * ``offload_config``: an ``OffloadConfig`` to make the trainer's own session
      from (``None`` and no session: ``OffloadConfig()``, trace and replay without
      a budget). ``trainer.offload_session.close()`` frees it after training.

    ``Trainer.training_step`` computes the loss (scaled for gradient
    accumulation as the Trainer does) and calls ``accelerator.backward``; the
    whole call is the ``with session:`` block, once per micro-batch. Everything
    else — the optimizer step, gradient clipping, the LR scheduler,
    ``zero_grad``, logging, evaluation and prediction — runs outside the
    session, as in the Trainer without it.
    """

    def __init__(self, *args: Any, offload_session: Optional[OffloadSession] = None,
                 offload_config: Optional[OffloadConfig] = None, **kwargs: Any) -> None:
        self.offload_session = _session_from(offload_session, offload_config, type(self).__name__)
        super().__init__(*args, **kwargs)

    def training_step(self, *args: Any, **kwargs: Any):
        session = self.offload_session
        if session.in_step:
            raise HyperoffloadError(
                f"{type(self).__name__}.training_step: its OffloadSession is already in a step (steps do not nest); "
                "do not call training_step inside `with session:`")
        with session:
            return super().training_step(*args, **kwargs)


def _make_offload_trainer() -> type:
    import transformers

    class OffloadTrainer(OffloadTrainerMixin, transformers.Trainer):
        """``transformers.Trainer`` with every training step under one ``OffloadSession``.

        ``OffloadTrainer(model=..., args=..., ..., offload_config=ho.OffloadConfig(...))``
        or ``offload_session=session``: see ``OffloadTrainerMixin``.
        """

    OffloadTrainer.__module__ = __name__
    OffloadTrainer.__qualname__ = "OffloadTrainer"
    return OffloadTrainer


def _lightning_callback_base() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError:  # the standalone package
        from pytorch_lightning import Callback
    return Callback


class _OffloadCallbackMethods:
    """The hooks of ``OffloadCallback`` (its base, Lightning's ``Callback``, is imported on first use)."""

    def __init__(self, offload: "OffloadConfig | OffloadSession | None" = None) -> None:
        super().__init__()
        if isinstance(offload, OffloadSession):
            self.offload_session = offload
        else:
            self.offload_session = _session_from(None, offload, "OffloadCallback")
        # Whether this callback opened the running step (so only it closes it).
        self._opened = False

    def _end_step(self, exc: Optional[BaseException] = None) -> None:
        if not self._opened:
            return
        self._opened = False
        if exc is None:
            self.offload_session.__exit__(None, None, None)
        else:
            self.offload_session.__exit__(type(exc), exc, exc.__traceback__)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._opened:  # a step the hooks below did not close (cannot happen with Lightning's loops)
            self._end_step()
        if self.offload_session.in_step:
            raise HyperoffloadError("OffloadCallback: its OffloadSession is already in a step (steps do not nest)")
        self.offload_session.__enter__()
        self._opened = True

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        # Automatic optimization: the closure (training_step, zero_grad,
        # backward) has run; clipping and the update follow, outside the step.
        # Manual optimization calls optimizer.step() inside training_step: the
        # step stays open to on_train_batch_end.
        if pl_module.automatic_optimization:
            self._end_step()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._end_step()  # a micro-batch that accumulates (no optimizer step), or manual optimization

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._end_step(exception)  # aborts the step: every tensor keeps its data

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._end_step()  # a batch whose on_train_batch_start stopped the epoch (a module hook returned -1)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._end_step()


def _make_offload_callback() -> type:
    base = _lightning_callback_base()

    class OffloadCallback(_OffloadCallbackMethods, base):
        """A Lightning ``Callback`` that runs each training batch's forward and backward as one session step.

        ``OffloadCallback(ho.OffloadConfig(...))`` makes the callback's own
        session (``callback.offload_session``; ``close()`` it after training);
        ``OffloadCallback(session)`` uses yours; ``OffloadCallback()`` traces and
        replays without a budget.

        The step opens in ``on_train_batch_start``. With automatic optimization
        it closes in ``on_before_optimizer_step``: after the closure's
        ``training_step``, ``zero_grad`` and ``backward``, before gradient
        clipping and the optimizer's update. A micro-batch that only accumulates
        (``accumulate_grad_batches``) has no optimizer step and closes in
        ``on_train_batch_end``, as does every batch with manual optimization
        (its optimizer steps are inside ``training_step``, so inside the step,
        the same in every step). An exception aborts the step
        (``on_exception``). Validation and prediction run outside the session.
        """

    OffloadCallback.__module__ = __name__
    OffloadCallback.__qualname__ = "OffloadCallback"
    return OffloadCallback


_LAZY = {"OffloadTrainer": _make_offload_trainer, "OffloadCallback": _make_offload_callback}


def __getattr__(name: str) -> type:
    make = _LAZY.get(name)
    if make is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = make()
    globals()[name] = value
    return value
