"""Runnable studies: each is a script (``python experiments/scripts/NAME.py``) whose functions
other code may import."""
