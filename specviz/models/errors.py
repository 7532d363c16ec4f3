"""Errors the user can act on: raised with a message that says what to do."""


class ModelUnavailable(RuntimeError):
    """Weights missing, no hub access, or not enough memory; the message says what is needed."""


class UnknownModel(KeyError):
    """A model name that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


class UnsupportedMethod(ValueError):
    """A method that needs something this model does not provide."""
