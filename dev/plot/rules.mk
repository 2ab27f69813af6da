# rules for dev/plot (included by the top-level Makefile)
#
#   make plot RUN=DIR   loss (train, val), throughput, learning rate and gradient norm of a run to
#                       DIR/plot.png, from DIR/log.jsonl, else llm.c's DIR/main.log
#   make test-plot      plots synthetic logs of both kinds and checks the PNGs and the errors
# matplotlib from Debian (python3-matplotlib), so Debian's python3 runs it.

PLOT_PYTHON ?= /usr/bin/python3

.PHONY: plot test-plot
plot:
	@if [ -z "$(RUN)" ]; then echo "usage: make plot RUN=DIR   (DIR: a trainer's -o directory)"; exit 2; fi
	$(Q)$(PLOT_PYTHON) dev/plot/plot_run.py "$(RUN)"

test-plot:
	$(Q)$(PLOT_PYTHON) dev/plot/test_plot.py

TEST_PHONY += test-plot
