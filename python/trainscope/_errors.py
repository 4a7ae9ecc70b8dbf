"""trainscope's exceptions: `Error` (from the native module) and `NonFiniteError`."""
from ._core import Error


class NonFiniteError(Error):
    """A NaN/Inf in the loss, an activation or a gradient, localised by `trainscope.watch`.

    Attributes (the same as the trainer's `nonfinite` metrics record, docs/formats.md):
      step: the step (1, 2, ...) at which the value turned non-finite.
      rank: this process's rank.
      phase: "forward", "backward", "loss" or "optimizer".
      module: the module's qualified name ("encoder.layer2"), "" when unknown.
      parameter: the parameter's qualified name for phase "backward"/"optimizer", else "".
      record: the whole record written to the metrics file (a dict).
    """

    def __init__(self, message, step, rank, phase, module, parameter, record=None):
        super().__init__(message)
        self.step = step
        self.rank = rank
        self.phase = phase
        self.module = module
        self.parameter = parameter
        self.record = record or {}

    def __reduce__(self):
        return (NonFiniteError, (str(self), self.step, self.rank, self.phase, self.module,
                                 self.parameter, self.record))
