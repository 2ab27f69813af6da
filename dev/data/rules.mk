# rules for dev/data (included by the top-level Makefile)
