"""The Python each tab shows: the public-API script that reproduces what it did."""
