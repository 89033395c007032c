# t/docs.mk — the documentation read as a contract: what it names exists where it says.
DOCS_TESTS = \
	t/docs-c-api-names-are-in-the-header.sh \
	t/docs-describe-runs-not-how-they-were-made.sh \
	t/docs-header-says-what-the-code-does.sh
TESTS += $(DOCS_TESTS)
EXTRA_DIST += $(DOCS_TESTS)
