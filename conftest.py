"""Every test run gets its own empty user catalog, whatever the developer's machine holds."""

from __future__ import annotations

import os
import tempfile

os.environ["PLACELAB_HOME"] = tempfile.mkdtemp(prefix="placelab-test-home-")
