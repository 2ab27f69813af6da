# rules for dev/cuda (included by the top-level Makefile)
