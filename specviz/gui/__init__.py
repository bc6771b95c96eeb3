"""Everything Qt: the decoding worker, the views and the main window."""

import os

# pyqtgraph prefers PyQt6 when several bindings are installed; specviz is PySide6 only.
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
