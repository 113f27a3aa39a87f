"""conftest.py — import qgen from this source tree (python/) unless QGEN_TEST_INSTALLED
is set, in which case the installed package is tested."""
import os
import sys

if not os.environ.get("QGEN_TEST_INSTALLED"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
