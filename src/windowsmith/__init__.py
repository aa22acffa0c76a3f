"""windowsmith: context engineering for LLM agents."""
