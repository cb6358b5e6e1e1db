//go:build arm

package fec

import "unsafe"

// storeWord writes v to *p with one 32-bit STR (store_arm.s). An aligned
// word store is single-copy atomic on ARMv7 (ARM ARM A3.5.3), which is all
// the uDMA needs of a descriptor word; the order of descriptor stores is
// the callers' Barrier's business, as in Linux's fec_main.c (plain writes,
// then dma_wmb before the status word). sync/atomic's StoreUint32 costs a
// LDREX/STREX loop with two DMBs per word on GOARM=7.
//
//go:noescape
func storeWord(p *uint32, v uint32)

// loadWord reads *p with one 32-bit LDR (store_arm.s): single-copy atomic
// like storeWord, without the DMB sync/atomic's LoadUint32 adds after
// every load on GOARM=7. Where a read depends on an ownership bit read
// before it (E, R, BDU), the caller orders the two with rmb.
//
//go:noescape
func loadWord(p *uint32) uint32

// rmb orders earlier loads before later ones as the uDMA sees memory: DMB
// OSH, Linux's dma_rmb on ARMv7 (arch/arm/include/asm/barrier.h).
func rmb()

// storeExt writes an enhanced descriptor's words other than the status
// word in one call (store_arm.s): the buffer address at dwAddr, ext0 at
// dwExt0, and zero at dwExt1 and dwExt2 (which clears BDU), each with one
// STR. Callers order them before the status word with Barrier.
//
//go:noescape
func storeExt(d unsafe.Pointer, addr, ext0 uint32)

// loadExt reads an enhanced descriptor's dwExt2 (BDU), then, after a DMB
// OSH (rmb), dwExt0 and dwExt1, in one call (store_arm.s): the sequence
// peekable needs for every frame, which cost three loadWord calls and an
// rmb call. The caller uses e0 and e1 only when e2 has BDU set.
//
//go:noescape
func loadExt(d unsafe.Pointer) (e2, e0, e1 uint32)
