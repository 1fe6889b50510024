"""The canonical tokenizer: loaded once on the driver, shipped to every engine, proven equal."""
