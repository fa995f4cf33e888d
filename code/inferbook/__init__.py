"""inferbook: the code behind the executable textbook on LLM inference optimization.

One module per concept; each chapter builds its algorithm step by step and then checks
the step-by-step version against the final form that lives here.
"""

__version__ = "0.1.0"
