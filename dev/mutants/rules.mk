# rules for dev/mutants (included by the top-level Makefile)
#
#   make mutants             every mutant of dev/mutants/*.mut: a planted bug that the make test checks
#                            it names must catch, in a temporary worktree of HEAD (run_mutants.py,
#                            docs/tests.md "The mutant suite"); about 25 minutes on 2 cores
#   make mutants ONLY=gelu   the mutants whose name contains gelu (or matches it as a glob)
# Not part of `make test`: it measures the tests, and takes a multiple of their time.

.PHONY: mutants
mutants:
	$(Q)PYTHON=$(PYTHON) TORCH_PYTHON=$(TORCH_PYTHON) LEANSTEP_DATA_MIRROR="$(LEANSTEP_DATA_MIRROR)" \
		$(PYTHON) dev/mutants/run_mutants.py $(if $(ONLY),--only '$(ONLY)')
