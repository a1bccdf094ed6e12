"""The errors of sluice_trainer: a leaf every other module may import."""


class SluiceError(RuntimeError):
    """Something about the exchange with sluice went wrong; the message says what.

    Uncaught, it is printed as one line (`sluice_trainer: ...`) rather than a traceback;
    set SLUICE_TRAINER_TRACEBACK=1 to see the traceback as well.
    """


class NotUnderSluice(SluiceError):
    """The process was not started by `sluice train --exec` or `sluice worker --exec`."""
