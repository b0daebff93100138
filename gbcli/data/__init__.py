"""Data: the dataset files and loaders (`sources`) and the config's dataset kinds (`datasets`)."""
