"""The errors a user's request can cause, one catalogue for the command line and the app.

Each message says what to change. The command line exits 2 on `REQUEST_ERRORS` and 3 on
`ModelUnavailable`; the app shows any of `USER_ERRORS` on its status line instead of a traceback.
Light: importing it loads neither torch nor the figures.
"""

from specviz.decoding.catalogue import UnknownMethod
from specviz.inputs import InputError
from specviz.models.errors import ModelUnavailable, UnknownModel, UnsupportedMethod
from specviz.models.settings import SettingsError
from specviz.threads import ThreadSettingError


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
