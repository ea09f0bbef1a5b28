r"""Shared by the tuning tests."""


def contains(space, config):
    r"""Whether ``config`` has exactly the space's names, each value in its range
    (integers integral, choices among the choices)."""
    if set(config) != {p.name for p in space}:
        return False
    for p in space:
        value = config[p.name]
        if p.kind == "choice":
            if value not in p.choices:
                return False
        elif p.kind == "int" and value != int(value):
            return False
        elif not p.low <= value <= p.high:
            return False
    return True
