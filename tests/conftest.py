import os

# Triton kernels run on the CPU through the interpreter; it must be chosen before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist (the README's test command runs two workers on two cores) each worker keeps to one
# intra-op thread, so two workers do not oversubscribe the cores with four busy OpenMP threads. Set
# before torch is imported; worker processes the tests start inherit it. A test that wants more threads
# asks for them explicitly (torch.set_num_threads / --threads).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
