"""mxhet-bench: runs real jobs through the launcher and reports measured numbers."""
