import os

# Triton kernels run on the CPU through the interpreter; it must be chosen before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
