"""Where the `sluice` binary is: `$SLUICE_BINARY` when set, else the one the
`sluice-train` wheel installed beside this module, else the first on the PATH."""

import os
import shutil
import sys
import sysconfig


class SluiceNotFound(FileNotFoundError):
    """No `sluice` binary: neither installed with this package nor on the PATH."""


def find_sluice_bin():
    """The path of the `sluice` binary.

    `$SLUICE_BINARY` when set; else where pip put the wheel's scripts (this
    interpreter's environment, the user scheme, the directory of `sys.executable`);
    else the PATH. Raises `SluiceNotFound` naming where it looked.
    """
    explicit = os.environ.get("SLUICE_BINARY")
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise SluiceNotFound(f"SLUICE_BINARY={explicit} is not an executable file")
    name = "sluice" + (sysconfig.get_config_var("EXE") or "")
    places = [sysconfig.get_path("scripts")]
    try:
        places.append(sysconfig.get_path("scripts", scheme=f"{os.name}_user"))
    except KeyError:
        pass
    # A venv used without activation: its bin directory is beside its python.
    places.append(os.path.dirname(sys.executable))
    for place in places:
        if not place:
            continue
        path = os.path.join(place, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise SluiceNotFound(
        f"no `{name}` binary in {', '.join(p for p in places if p)} or on the PATH: "
        "pip install sluice-train (its wheel carries the binary), or set SLUICE_BINARY "
        "to the binary's path"
    )
