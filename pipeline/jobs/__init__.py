"""The nightly jobs. Each module has pure transforms: DataFrame in, DataFrame out."""
