# t/gpt.mk — tests of the gpt area.
