"""The errors a user's request can cause, one catalogue for the command line and the app.

Each message says what to change. The command line exits 2 on `REQUEST_ERRORS` and 3 on
`ModelUnavailable`; the app shows any of `USER_ERRORS` on its status line instead of a traceback.
Light: importing it loads neither torch nor the figures.
"""

from specviz.core.catalogue import UnknownMethod
from specviz.core.inputs import InputError
from specviz.core.settings import SettingsError
from specviz.core.threads import ThreadSettingError


class ModelUnavailable(RuntimeError):
    """Weights missing, no hub access, or not enough memory; the message says what is needed."""


class UnknownModel(KeyError):
    """A model name that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


class UnsupportedMethod(ValueError):
    """A method that needs something this model does not provide."""


class TraceError(ValueError):
    """A trace file that cannot be used; the message says why."""


class ExportError(ValueError):
    """An animation that cannot be drawn within the export bounds; the message says why."""


REQUEST_ERRORS = (
    InputError,
    SettingsError,
    ThreadSettingError,
    UnknownModel,
    UnknownMethod,
    UnsupportedMethod,
    TraceError,
    ExportError,
)
USER_ERRORS = (*REQUEST_ERRORS, ModelUnavailable)
