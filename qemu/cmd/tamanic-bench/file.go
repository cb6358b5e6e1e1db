package main

import "os"

func newFile(p string) (*os.File, error) { return os.Create(p) }
