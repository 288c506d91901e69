"""Process groups of the servers and Ray nodes the project starts (`start_new_session=True`)."""

from __future__ import annotations

import os


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` is still alive (signal 0 probes it; a
    group of another user's processes counts as alive)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
