# rules for dev/reference (included by the top-level Makefile)
