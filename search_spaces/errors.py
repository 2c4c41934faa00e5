"""Exceptions raised by search_spaces at its boundary; each message is one line for the user."""


class SpecError(Exception):
    """Base class: something about a kernel spec, problem or config is wrong."""


class ProblemError(SpecError):
    """A problem does not fit the kernel's schema (missing dim, bad value, unknown dtype)."""


class ConfigError(SpecError):
    """A config names an unknown parameter, a value outside its list, or breaks a constraint."""


class RegistryError(SpecError):
    """A kernel name is unknown, or a ``module:attribute`` does not import or is not a spec."""
