"""The proxy's other doors: each dialect translated, purely, to the chat request the
pipeline serves and its answer translated back (one module or package per dialect)."""
