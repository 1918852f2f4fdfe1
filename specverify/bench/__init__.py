"""Timing harnesses: plain vs speculative decode on the real model (`decode`). The `specverify
bench` command parses its flags, calls them and prints; the kernel-level benches live in
`specverify.kerneltools`."""
