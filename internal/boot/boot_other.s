//go:build !(tamago && arm && linkcpuinit)

// zeroBSS exists only in the linkcpuinit build for the ARM firmware; the
// empty file lets the Go declaration compile everywhere else (a package
// with a body-less function needs an assembly file).
