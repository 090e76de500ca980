"""Evidence packets: the worker run in the configurations a release reviewer needs, with the
results read back from the store and written as JSON, Markdown and pictures."""
