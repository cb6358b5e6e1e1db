/*
 * cachemodel: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) for
 * tamanic-cost -cache. Every guest load and store, by physical address,
 * goes through a model of the SoC's data caches; accesses to RAM the
 * firmware maps uncached (strongly ordered) and to device registers are
 * counted apart; the ARMv7 data cache maintenance by MVA and the PL310's
 * by-PA maintenance registers act on the model line by line. One vCPU.
 *
 * Arguments (key=value, comma separated on the -plugin option):
 *   out=FILE         dump file: when FILE.req appears, every counter is
 *                    written to FILE ("name value" lines, then one
 *                    "M<k> name value" block per mark) and FILE.req removed
 *   l1=SIZE:WAYS:LINE:POLICY  the inner data cache (POLICY lru|random|rr)
 *   l2=SIZE:WAYS:LINE:POLICY  the second level
 *   outer=1          the L2 is an outer cache (PL310): the CP15 by-MVA
 *                    operations stop at L1 and the PL310's registers act
 *                    on it; without it the L2 is the core's own and the
 *                    operations to the point of coherency reach it
 *   wa=0|1           whether a write miss allocates (the mapping's
 *                    attribute; TamaGo maps RAM Write-Back no Write-Allocate)
 *   wb=LO-HI         a RAM range mapped Write-Back cacheable (repeatable);
 *                    RAM outside every wb range is counted as uncached
 *   ram=FILE@BASE    guest RAM shared through a memory-backend-file: the
 *                    plugin reads the arguments of the maintenance
 *                    routines from it (below)
 *   mva=KIND@LO-HI   a by-MVA maintenance routine of the firmware: KIND is
 *                    clean, inv, cleaninv (every line of [start, end)) or
 *                    invrange (partial lines cleaned and invalidated)
 *   io=LO-HI         a physical range counted as device registers even
 *                    where QEMU backs it with RAM (the ConnectX
 *                    co-simulation's BAR, an ivshmem-plain RAM BAR, in
 *                    the PCIe outbound window: device memory on silicon);
 *                    tested on the virtual address (TamaGo maps 1:1)
 *   pl310=BASE       the PL310 register block's physical address
 *   pl310mirror=1    add what dma.TwoLevel does on silicon with a PL310
 *                    to each by-MVA routine (for QEMU 7.2's sabrelite,
 *                    which has no PL310: the firmware finds none and
 *                    maintains L1 only): see mirror_line and mirror_sync
 *   mark=ADDR        an instruction whose execution snapshots every counter
 *                    (the guest microbenchmark's phase boundaries)
 *
 * Why the routines: QEMU 7.2's plugin API shows an instruction's bytes but
 * not its registers, so an MCR's Rt (the MVA) is invisible. The firmware's
 * maintenance is four assembly routines (dma/cache_arm.s) that load start
 * and end from their argument slots, then issue one MCR per line in a fixed
 * order. The plugin sees those two loads (their physical address) and reads
 * the values from guest RAM through the shared backend file, derives the
 * line sequence the routine's contract defines, and gives each MCR executed
 * in the routine the next line, checking that the MCR's operation (CRm) is
 * the one expected and that the count matches (mva_mismatch,
 * mva_leftover). An MCR outside the routines is counted (mva_unknown) and
 * not applied. A PL310 maintenance store's value is likewise invisible: it
 * is the last word loaded from the stack (LDR Rt, [SP, #imm]) before the
 * store: mmio.Block.Write32 calls the runtime's atomic store
 * (internal/runtime/atomic.Store, sys_nonlinux_arm.s), which loads the
 * address and then the value from its argument slots, then a literal and
 * the goarm byte (not stack loads), then stores;
 * read from guest RAM; a value that is not a line-aligned address in a wb
 * range is counted (pl310_bad), not applied. QEMU 7.2's sabrelite has no
 * PL310, so this path runs only on a QEMU that models one.
 *
 * QEMU 7.2's qemu_plugin_hwaddr_phys_addr returns block->offset + offset +
 * mr->addr for RAM (fixed later to the plain physical address); the RAM
 * block is the first one allocated, so block->offset is 0, and TamaGo maps
 * RAM 1:1: an access whose physical address differs from its virtual one is
 * counted (pa_mismatch) so that a violated assumption shows.
 *
 * Built with CACHEMODEL_HOST_TEST defined, the QEMU glue is left out and a
 * main reads model commands from stdin (the host unit test).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum policy { POL_LRU, POL_RANDOM, POL_RR };

/* A set-associative cache of lines: tags and dirty bits only. */
struct cache {
	uint32_t sets, ways, shift;
	enum policy policy;
	uint64_t *tag; /* line number + 1; 0: invalid */
	uint8_t *dirty;
	uint64_t *used; /* LRU: the access clock at the last use */
	uint64_t clock;
	uint32_t rr, lfsr;
};

#define COUNTERS(X)                                                                         \
	X(insns) X(loads) X(stores) X(l1_read_hit) X(l1_read_miss) X(l1_write_hit)          \
	X(l1_write_miss) X(l1_evict_wb) X(l2_read_hit) X(l2_read_miss) X(l2_write_hit)      \
	X(l2_write_miss) X(l2_evict_wb) X(dram_read) X(dram_write) X(wt_lines)             \
	X(unc_read) X(unc_write) X(dev_read) X(dev_write) X(dccmvac) X(dcimvac)            \
	X(dccimvac) X(dccmvau) X(setway) X(maint_l1_wb) X(maint_l2_wb) X(mva_unknown)        \
	X(mva_mismatch) X(mva_leftover) X(pl310_clean) X(pl310_inv) X(pl310_cleaninv)      \
	X(pl310_way) X(pl310_sync) X(pl310_bad) X(pl310_mirror_dev) X(pa_mismatch) X(no_hwaddr) \
	X(marks_dropped) X(inv_dirty)
#define ENUM(n) C_##n,
#define NAME(n) #n,
enum { COUNTERS(ENUM) NCOUNT };
static const char *names[] = {COUNTERS(NAME)};

/* The data side: L1, L2 and what lies beyond. */
struct model {
	struct cache l1, l2;
	bool outer; /* the L2 is a PL310: CP15 operations stop at L1 */
	bool wa;    /* write misses allocate */
	uint64_t lastwt; /* line number + 1 of the last merged write to DRAM */
	uint64_t c[NCOUNT];
};

static int cache_init(struct cache *c, uint64_t size, uint32_t ways, uint32_t line, enum policy p) {
	if (ways == 0 || line < 4 || (line & (line - 1)) || size % ((uint64_t)ways * line)) return -1;
	memset(c, 0, sizeof *c);
	c->sets = size / ((uint64_t)ways * line);
	if (c->sets & (c->sets - 1)) return -1;
	c->ways = ways;
	while ((1u << c->shift) < line) c->shift++;
	c->policy = p;
	c->lfsr = 1;
	c->tag = calloc((size_t)c->sets * ways, sizeof *c->tag);
	c->dirty = calloc((size_t)c->sets * ways, 1);
	c->used = calloc((size_t)c->sets * ways, sizeof *c->used);
	return c->tag && c->dirty && c->used ? 0 : -1;
}

/* find returns the slot holding line, or -1. */
static long find(struct cache *c, uint64_t line) {
	size_t base = (size_t)(line & (c->sets - 1)) * c->ways;
	for (uint32_t w = 0; w < c->ways; w++)
		if (c->tag[base + w] == line + 1) return (long)(base + w);
	return -1;
}

static void touch(struct cache *c, long slot) { c->used[slot] = ++c->clock; }

/*
 * victim picks the slot a fill of line replaces: the lowest invalid way
 * first, else by the policy. The pseudo-random generator is a 32-bit
 * Galois LFSR (taps 32,22,2,1) with a fixed seed: the TRMs do not give the
 * hardware's, and a fixed seed keeps runs repeatable.
 */
static long victim(struct cache *c, uint64_t line) {
	size_t base = (size_t)(line & (c->sets - 1)) * c->ways;
	for (uint32_t w = 0; w < c->ways; w++)
		if (c->tag[base + w] == 0) return (long)(base + w);
	uint32_t w = 0;
	switch (c->policy) {
	case POL_LRU:
		for (uint32_t i = 1; i < c->ways; i++)
			if (c->used[base + i] < c->used[base + w]) w = i;
		break;
	case POL_RANDOM:
		c->lfsr = (c->lfsr >> 1) ^ (-(c->lfsr & 1u) & 0x80200003u);
		w = c->lfsr % c->ways;
		break;
	case POL_RR:
		w = c->rr++ % c->ways;
		break;
	}
	return (long)(base + w);
}

/* l2_write takes a line-sized write from L1 (an eviction or a clean) or a
 * store that missed L1 without allocating. */
static void l2_write(struct model *m, uint64_t pa, bool fromstore) {
	struct cache *c = &m->l2;
	uint64_t line = pa >> c->shift;
	long s = find(c, line);
	if (s >= 0) {
		m->c[C_l2_write_hit]++;
		c->dirty[s] = 1;
		touch(c, s);
		return;
	}
	m->c[C_l2_write_miss]++;
	if (m->wa) {
		s = victim(c, line);
		if (c->tag[s] && c->dirty[s]) {
			m->c[C_l2_evict_wb]++;
			m->c[C_dram_write]++;
		}
		if (fromstore) m->c[C_dram_read]++; /* the rest of the line */
		if (m->lastwt == line + 1) m->lastwt = 0;
		c->tag[s] = line + 1;
		c->dirty[s] = 1;
		touch(c, s);
		return;
	}
	/* No allocation: the write goes to DRAM; consecutive stores to one
	 * line merge in the store buffer into one write. */
	if (!fromstore || m->lastwt != line + 1) {
		m->c[C_dram_write]++;
		if (fromstore) m->c[C_wt_lines]++;
	}
	if (fromstore) m->lastwt = line + 1;
}

/* l2_read brings the line of pa into L2 for an L1 fill. */
static void l2_read(struct model *m, uint64_t pa) {
	struct cache *c = &m->l2;
	uint64_t line = pa >> c->shift;
	long s = find(c, line);
	if (s >= 0) {
		m->c[C_l2_read_hit]++;
		touch(c, s);
		return;
	}
	m->c[C_l2_read_miss]++;
	m->c[C_dram_read]++;
	/* The fill reads the line from DRAM, so a write to it still in the
	 * store buffer has drained before it (a core's read of a location
	 * returns its own earlier write to it: ARMv7 ARM A3.8, "Memory access
	 * order"); a later store to the line is a new DRAM write. */
	if (m->lastwt == line + 1) m->lastwt = 0;
	s = victim(c, line);
	if (c->tag[s] && c->dirty[s]) {
		m->c[C_l2_evict_wb]++;
		m->c[C_dram_write]++;
	}
	c->tag[s] = line + 1;
	c->dirty[s] = 0;
	touch(c, s);
}

/* l1_fill allocates the line of pa in L1, writing back a dirty victim. */
static long l1_fill(struct model *m, uint64_t pa) {
	struct cache *c = &m->l1;
	uint64_t line = pa >> c->shift;
	l2_read(m, pa);
	long s = victim(c, line);
	if (c->tag[s] && c->dirty[s]) {
		m->c[C_l1_evict_wb]++;
		l2_write(m, (c->tag[s] - 1) << c->shift, false);
	}
	c->tag[s] = line + 1;
	c->dirty[s] = 0;
	touch(c, s);
	return s;
}

/* model_read is a load from cacheable memory touching the line of pa. */
static void model_read(struct model *m, uint64_t pa) {
	long s = find(&m->l1, pa >> m->l1.shift);
	if (s >= 0) {
		m->c[C_l1_read_hit]++;
		touch(&m->l1, s);
		return;
	}
	m->c[C_l1_read_miss]++;
	l1_fill(m, pa);
}

/* model_write is a store to cacheable memory touching the line of pa. */
static void model_write(struct model *m, uint64_t pa) {
	long s = find(&m->l1, pa >> m->l1.shift);
	if (s >= 0) {
		m->c[C_l1_write_hit]++;
		m->l1.dirty[s] = 1;
		touch(&m->l1, s);
		return;
	}
	m->c[C_l1_write_miss]++;
	if (m->wa) {
		s = l1_fill(m, pa);
		m->l1.dirty[s] = 1;
		return;
	}
	l2_write(m, pa, true);
}

enum { OP_CLEAN = 1, OP_INV = 2, OP_CLEANINV = 3 };

/*
 * The invalidate-address check (inv_dirty): an invalidate without clean
 * (DCIMVAC, the PL310's Invalidate Line by PA at 0x770) of a line that
 * holds data the CPU wrote and no clean has written back discards that
 * data: the ARMv7 ARM (DDI 0406C, B2.2 "Caches and branch predictors",
 * its cache maintenance operations; section number not re-read this
 * session) lets an invalidate lose dirty data, and neither the
 * Cortex-A7 nor the Cortex-A9 TRM says the core turns it into a clean and
 * invalidate (some later cores do: the Cortex-A53 does). The model
 * discards the line, as silicon may, and counts each operation that
 * discarded dirty data once: a DCIMVAC on the Cortex-A7 reaches its L2 too
 * and counts once even if both levels held the line dirty; with a PL310,
 * the CP15 operation and the PL310's are two operations.
 * A driver whose buffer the CPU wrote before handing it to the device for
 * a receive loses those writes on silicon but not under QEMU.
 */

/* l2_op applies a clean and/or invalidate to the L2 line of pa (a PL310
 * by-PA register, or a CP15 operation to the point of coherency reaching
 * the core's own L2); it reports whether an invalidate discarded a dirty
 * line (the caller counts inv_dirty). */
static bool l2_op(struct model *m, int op, uint64_t pa) {
	struct cache *c = &m->l2;
	long s = find(c, pa >> c->shift);
	if (s < 0) return false;
	bool lost = op == OP_INV && c->dirty[s];
	if ((op & OP_CLEAN) && c->dirty[s]) {
		c->dirty[s] = 0;
		m->c[C_maint_l2_wb]++;
		m->c[C_dram_write]++;
	}
	if (op & OP_INV) {
		c->tag[s] = 0;
		c->dirty[s] = 0;
	}
	return lost;
}

/* cp15_op is DCCMVAC (OP_CLEAN), DCIMVAC (OP_INV) or DCCIMVAC
 * (OP_CLEANINV) on the line of mva (= pa: TamaGo maps 1:1). */
static void cp15_op(struct model *m, int op, uint64_t pa) {
	m->c[op == OP_CLEAN ? C_dccmvac : op == OP_INV ? C_dcimvac : C_dccimvac]++;
	struct cache *c = &m->l1;
	long s = find(c, pa >> c->shift);
	bool lost = false;
	if (s >= 0) {
		lost = op == OP_INV && c->dirty[s];
		if ((op & OP_CLEAN) && c->dirty[s]) {
			c->dirty[s] = 0;
			m->c[C_maint_l1_wb]++;
			if (m->outer) {
				l2_write(m, pa, false);
			} else {
				/* To the point of coherency: through the
				 * core's L2 to DRAM. */
				long t = find(&m->l2, pa >> m->l2.shift);
				if (t >= 0) m->l2.dirty[t] = 0;
				m->c[C_dram_write]++;
			}
		}
		if (op & OP_INV) {
			c->tag[s] = 0;
			c->dirty[s] = 0;
		}
	}
	if (!m->outer && l2_op(m, op, pa)) lost = true;
	if (lost) m->c[C_inv_dirty]++;
}

static void pl310_op(struct model *m, int op, uint64_t pa) {
	m->c[op == OP_CLEAN ? C_pl310_clean : op == OP_INV ? C_pl310_inv : C_pl310_cleaninv]++;
	if (l2_op(m, op, pa)) m->c[C_inv_dirty]++;
}

/*
 * With pl310mirror=1 the firmware ran with no PL310 (QEMU 7.2's sabrelite)
 * and each range operation was one by-MVA routine: dcacheClean,
 * dcacheCleanInvalidate, or dcacheInvalidateRange (dma.ARMv7Cache and
 * l1Sync with Outer nil). On the i.MX6Q the same operation runs
 * dma.TwoLevel (dma/outer.go) over the same 32-byte lines (the Cortex-A9's
 * line is dma.InnerLine and dma.PL310Line), and does in addition:
 *  - per line, one store to the PL310's by-PA register (dma/pl310.go
 *    lineOp, Invalidate: one Regs.Write32 each; L2C-310 TRM r3p3 3.3.10,
 *    0x7B0 clean, 0x770 invalidate, 0x7F0 clean and invalidate, the
 *    partial lines of an invalidate clean and invalidate): a strongly
 *    ordered device access, counted as dev_write;
 *  - for an invalidate, a second inner pass over the same lines with the
 *    same operations (TwoLevel.Invalidate: innerInvalidate again after the
 *    outer pass), counted as by-MVA operations;
 *  - per range operation, CACHE_SYNC (dma/pl310.go Sync): one store to
 *    0x730 and at least one read of it, counted as one dev_write and one
 *    dev_read (the fewest polls: the drain's length is not modelled).
 * pl310_mirror_dev counts the device accesses added, so that a report can
 * tell them from the ones the guest made. The instructions of TwoLevel's
 * Go loops (interface calls, mmio.Regs.Write32 per line) are not added.
 */
static void mirror_line(struct model *m, int op, uint64_t pa, bool invalidate) {
	pl310_op(m, op, pa);
	m->c[C_dev_write]++;
	m->c[C_pl310_mirror_dev]++;
	/* The second inner pass finds the line gone (nothing runs between
	 * the passes in the model); it is executed and counted all the same. */
	if (invalidate) cp15_op(m, op, pa);
}

static void mirror_sync(struct model *m) {
	m->c[C_pl310_sync]++;
	m->c[C_dev_write]++;
	m->c[C_dev_read]++;
	m->c[C_pl310_mirror_dev] += 2;
}

static enum policy parse_policy(const char *s, int *ok) {
	*ok = 1;
	if (!strcmp(s, "lru")) return POL_LRU;
	if (!strcmp(s, "random")) return POL_RANDOM;
	if (!strcmp(s, "rr")) return POL_RR;
	*ok = 0;
	return POL_LRU;
}

/* parse_cache reads SIZE:WAYS:LINE:POLICY. */
static int parse_cache(struct cache *c, const char *s) {
	char pol[16];
	unsigned long long size;
	unsigned ways, line;
	int ok;
	if (sscanf(s, "%llu:%u:%u:%15s", &size, &ways, &line, pol) != 4) return -1;
	enum policy p = parse_policy(pol, &ok);
	if (!ok) return -1;
	return cache_init(c, size, ways, line, p);
}

static void print_counters(FILE *f, const char *prefix, const uint64_t *c) {
	for (int i = 0; i < NCOUNT; i++) fprintf(f, "%s%s %llu\n", prefix, names[i], (unsigned long long)c[i]);
}

#ifdef CACHEMODEL_HOST_TEST
/*
 * Host test driver: reads "l1 SPEC", "l2 SPEC", "outer 0|1", "wa 0|1",
 * then "r PA", "w PA", "clean PA", "inv PA", "cleaninv PA", "pclean PA",
 * "pinv PA", "pcleaninv PA", "dump"; each address a line access. The
 * pl310mirror steps: "mclean PA", "mcleaninv PA" (a clean or clean and
 * invalidate routine's line), "minv PA", "mpartial PA" (an invalidate's
 * whole and partial lines) each do the MCR and its mirror_line; "msync 0"
 * ends the range operation.
 */
int main(void) {
	static struct model m;
	char cmd[32], arg[64];
	int have1 = 0, have2 = 0;
	while (scanf("%31s %63s", cmd, arg) == 2) {
		unsigned long long a = strtoull(arg, NULL, 0);
		if (!strcmp(cmd, "l1")) {
			if (parse_cache(&m.l1, arg)) return 2;
			have1 = 1;
		} else if (!strcmp(cmd, "l2")) {
			if (parse_cache(&m.l2, arg)) return 2;
			have2 = 1;
		} else if (!have1 || !have2) {
			return 2;
		} else if (!strcmp(cmd, "outer")) {
			m.outer = a != 0;
		} else if (!strcmp(cmd, "wa")) {
			m.wa = a != 0;
		} else if (!strcmp(cmd, "r")) {
			model_read(&m, a);
		} else if (!strcmp(cmd, "w")) {
			model_write(&m, a);
		} else if (!strcmp(cmd, "clean")) {
			cp15_op(&m, OP_CLEAN, a);
		} else if (!strcmp(cmd, "inv")) {
			cp15_op(&m, OP_INV, a);
		} else if (!strcmp(cmd, "cleaninv")) {
			cp15_op(&m, OP_CLEANINV, a);
		} else if (!strcmp(cmd, "pclean")) {
			pl310_op(&m, OP_CLEAN, a);
		} else if (!strcmp(cmd, "pinv")) {
			pl310_op(&m, OP_INV, a);
		} else if (!strcmp(cmd, "pcleaninv")) {
			pl310_op(&m, OP_CLEANINV, a);
		} else if (!strcmp(cmd, "mclean") || !strcmp(cmd, "mcleaninv") || !strcmp(cmd, "minv") || !strcmp(cmd, "mpartial")) {
			int op = !strcmp(cmd, "mclean") ? OP_CLEAN : !strcmp(cmd, "minv") ? OP_INV : OP_CLEANINV;
			bool inval = !strcmp(cmd, "minv") || !strcmp(cmd, "mpartial");
			cp15_op(&m, op, a);
			mirror_line(&m, op, a, inval);
		} else if (!strcmp(cmd, "msync")) {
			mirror_sync(&m);
		} else if (!strcmp(cmd, "dump")) {
			print_counters(stdout, "", m.c);
			printf("end\n");
			fflush(stdout);
		} else {
			return 2;
		}
	}
	return 0;
}
#else
/* The QEMU 7.2 plugin API functions used, as include/qemu/qemu-plugin.h
 * (QEMU_PLUGIN_VERSION 1) declares them. */
typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_plugin_hwaddr;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
extern void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr, uint64_t imm);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
extern const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
extern size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
extern uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
extern void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, void (*cb)(unsigned int, void *), enum qemu_plugin_cb_flags flags, void *userdata);
extern void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, void (*cb)(unsigned int, qemu_plugin_meminfo_t, uint64_t, void *), enum qemu_plugin_cb_flags flags, enum qemu_plugin_mem_rw rw, void *userdata);
extern unsigned int qemu_plugin_mem_size_shift(qemu_plugin_meminfo_t info);
extern bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t info);
extern struct qemu_plugin_hwaddr *qemu_plugin_get_hwaddr(qemu_plugin_meminfo_t info, uint64_t vaddr);
extern bool qemu_plugin_hwaddr_is_io(const struct qemu_plugin_hwaddr *haddr);
extern uint64_t qemu_plugin_hwaddr_phys_addr(const struct qemu_plugin_hwaddr *haddr);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define MAXRANGES 16
#define MAXMARKS 64

enum { R_CLEAN, R_INV, R_CLEANINV, R_INVRANGE };

static struct model model;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char out[512], req[600];
static uint64_t wblo[MAXRANGES], wbhi[MAXRANGES];
static int nwb;
static uint64_t iolo[MAXRANGES], iohi[MAXRANGES];
static int nio;
static uint64_t rlo[MAXRANGES], rhi[MAXRANGES];
static int rkind[MAXRANGES], nroutines;
static uint64_t marks[MAXRANGES];
static int nmarkaddrs;
static uint64_t snaps[MAXMARKS][NCOUNT];
static int nsnaps;
static const uint8_t *ram;
static uint64_t rambase, ramsize;
static uint64_t pl310 = ~0ull;
static bool mirror;
static uint64_t lastload; /* physical address + 1 of the last word loaded from the stack */

/* The maintenance routine running, with the lines its MCRs are due. */
static struct {
	int routine; /* index + 1, 0: none */
	int nargs;
	uint64_t args[2];
	int npre, ipre; /* partial lines first (invrange) */
	uint64_t pre[2];
	uint64_t cur, end;
} run;

/* map_ram maps the guest RAM file (ram=FILE@BASE) the first time a value
 * is needed: QEMU loads plugins before it creates the memory backend that
 * sizes the file. */
static char rampath[512];
static bool map_ram(void) {
	if (ram != NULL) return true;
	if (rampath[0] == 0) return false;
	int fd = open(rampath, O_RDONLY);
	if (fd < 0) return false;
	struct stat sb;
	if (fstat(fd, &sb) != 0 || sb.st_size == 0) {
		close(fd);
		return false;
	}
	void *p = mmap(NULL, sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) return false;
	ramsize = sb.st_size;
	ram = p;
	return true;
}

static bool ram_word(uint64_t pa, uint64_t *v) {
	if (!map_ram() || pa < rambase || pa + 4 > rambase + ramsize) return false;
	uint32_t w;
	memcpy(&w, ram + (pa - rambase), 4);
	*v = w;
	return true;
}

/* plan derives the lines of the routine's MCRs from its arguments
 * (dma/cache_arm.s): clean, inv and cleaninv walk [start&^(L-1), end);
 * invrange cleans and invalidates a partial first line, then a partial
 * last line, then invalidates the whole lines between. */
static void plan(void) {
	uint64_t l = 1ull << model.l1.shift, m = l - 1, start = run.args[0], end = run.args[1];
	run.npre = run.ipre = 0;
	if (rkind[run.routine - 1] != R_INVRANGE) {
		run.cur = start & ~m;
		run.end = end;
		return;
	}
	uint64_t r0 = start, r1 = end;
	if (start & m) {
		run.pre[run.npre++] = start & ~m;
		r0 = (start & ~m) + l;
	}
	if (r0 < end && (end & m)) {
		run.pre[run.npre++] = end & ~m;
		r1 = end & ~m;
	}
	run.cur = r0;
	run.end = r1 > r0 ? r1 : r0;
}

static bool in_wb(uint64_t pa) {
	for (int i = 0; i < nwb; i++)
		if (pa >= wblo[i] && pa < wbhi[i]) return true;
	return false;
}

static void mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *ud) {
	(void)vcpu;
	bool st = qemu_plugin_mem_is_store(info);
	unsigned size = 1u << qemu_plugin_mem_size_shift(info);
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
	model.c[st ? C_stores : C_loads]++;
	if (hw == NULL) {
		model.c[C_no_hwaddr]++;
		return;
	}
	uint64_t pa = qemu_plugin_hwaddr_phys_addr(hw);
	for (int i = 0; i < nio; i++)
		if (vaddr >= iolo[i] && vaddr < iohi[i]) {
			model.c[st ? C_dev_write : C_dev_read]++;
			return;
		}
	if (qemu_plugin_hwaddr_is_io(hw)) {
		model.c[st ? C_dev_write : C_dev_read]++;
		if (st && pa >= pl310 && pa < pl310 + 0x1000) {
			uint64_t off = pa - pl310, v;
			int op = off == 0x7B0 ? OP_CLEAN : off == 0x770 ? OP_INV : off == 0x7F0 ? OP_CLEANINV : 0;
			if (op) {
				if (lastload && ram_word(lastload - 1, &v) && (v & ((1u << model.l2.shift) - 1)) == 0 && in_wb(v))
					pl310_op(&model, op, v);
				else
					model.c[C_pl310_bad]++;
			} else if (off == 0x77C || off == 0x7BC || off == 0x7FC) {
				model.c[C_pl310_way]++;
			} else if (off == 0x730) {
				model.c[C_pl310_sync]++;
			}
		}
		return;
	}
	/* TamaGo maps 1:1; a mismatch matters only where the model caches.
	 * (QEMU 7.2 reports a second RAM block, the i.MX6UL's OCRAM where
	 * the baseline firmware's DMA region lies, at its ram_addr offset:
	 * strongly ordered there, so counted as uncached either way.) */
	if (pa != vaddr && (in_wb(pa) || in_wb(vaddr))) model.c[C_pa_mismatch]++;
	uintptr_t r = (uintptr_t)ud & 0xFF;
	if (!st && size == 4 && ((uintptr_t)ud & 0x100)) lastload = pa + 1;
	if (r && !st && run.routine == (int)r && run.nargs < 2) {
		uint64_t v = 0;
		if (!ram_word(pa, &v)) model.c[C_mva_mismatch]++;
		run.args[run.nargs++] = v;
		if (run.nargs == 2) plan();
	}
	if (!in_wb(pa)) {
		model.c[st ? C_unc_write : C_unc_read]++;
		return;
	}
	uint32_t sh = model.l1.shift;
	for (uint64_t line = pa >> sh; line <= (pa + size - 1) >> sh; line++) {
		if (st)
			model_write(&model, line << sh);
		else
			model_read(&model, line << sh);
	}
}

/* entered resets the maintenance routine state at the routine's first
 * instruction; a routine left with MCRs owed is counted. */
static void entered(unsigned int vcpu, void *ud) {
	(void)vcpu;
	if (run.routine && (run.ipre < run.npre || run.cur < run.end)) model.c[C_mva_leftover]++;
	memset(&run, 0, sizeof run);
	run.routine = (int)(uintptr_t)ud;
	if (mirror && model.outer) mirror_sync(&model); /* each range operation's CACHE_SYNC */
}

/* mcr is an executed MCR p15,0,Rt,c7,CRm,opc2: ud holds CRm | opc2<<4 |
 * (routine index + 1)<<8. */
static void mcr(unsigned int vcpu, void *ud) {
	(void)vcpu;
	uintptr_t u = (uintptr_t)ud;
	int crm = u & 15, opc2 = (u >> 4) & 7, r = (int)(u >> 8);
	if (opc2 == 2) {
		model.c[C_setway]++;
		return;
	}
	if (crm == 11) {
		model.c[C_dccmvau]++; /* to the point of unification: L1 only, as clean */
		return;
	}
	int op = crm == 10 ? OP_CLEAN : crm == 6 ? OP_INV : OP_CLEANINV;
	if (r == 0 || run.routine != r || run.nargs < 2) {
		model.c[op == OP_CLEAN ? C_dccmvac : op == OP_INV ? C_dcimvac : C_dccimvac]++;
		model.c[C_mva_unknown]++;
		return;
	}
	uint64_t line;
	int want;
	int kind = rkind[r - 1];
	if (run.ipre < run.npre) {
		line = run.pre[run.ipre++];
		want = OP_CLEANINV;
	} else if (run.cur < run.end) {
		line = run.cur;
		run.cur += 1ull << model.l1.shift;
		want = kind == R_CLEAN ? OP_CLEAN : kind == R_CLEANINV ? OP_CLEANINV : OP_INV;
	} else {
		model.c[op == OP_CLEAN ? C_dccmvac : op == OP_INV ? C_dcimvac : C_dccimvac]++;
		model.c[C_mva_mismatch]++;
		return;
	}
	if (want != op) model.c[C_mva_mismatch]++;
	cp15_op(&model, op, line);
	if (mirror && model.outer) mirror_line(&model, op, line, kind == R_INVRANGE);
}

static void marked(unsigned int vcpu, void *ud) {
	(void)vcpu;
	(void)ud;
	pthread_mutex_lock(&mu);
	if (nsnaps < MAXMARKS)
		memcpy(snaps[nsnaps++], model.c, sizeof model.c);
	else
		model.c[C_marks_dropped]++; /* the snapshot table is full */
	pthread_mutex_unlock(&mu);
}

static int routine_of(uint64_t pc) {
	for (int i = 0; i < nroutines; i++)
		if (pc >= rlo[i] && pc < rhi[i]) return i + 1;
	return 0;
}

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
	(void)id;
	size_t n = qemu_plugin_tb_n_insns(tb);
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &model.c[C_insns], n);
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint64_t pc = qemu_plugin_insn_vaddr(insn);
		int r = routine_of(pc);
		for (int k = 0; k < nmarkaddrs; k++)
			if (pc == marks[k]) qemu_plugin_register_vcpu_insn_exec_cb(insn, marked, QEMU_PLUGIN_CB_NO_REGS, NULL);
		if (r && pc == rlo[r - 1]) qemu_plugin_register_vcpu_insn_exec_cb(insn, entered, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)r);
		if (qemu_plugin_insn_size(insn) == 4) {
			uint32_t w;
			memcpy(&w, qemu_plugin_insn_data(insn), 4);
			/* MCR p15, 0, Rt, c7, CRm, opc2 (ARM ARM A8.8.98, encoding A1) */
			if ((w >> 28) != 0xF && (w & 0x0FFF0F10) == 0x0E070F10) {
				int crm = w & 15, opc2 = (w >> 5) & 7;
				bool mva = opc2 == 1 && (crm == 6 || crm == 10 || crm == 11 || crm == 14);
				bool sw = opc2 == 2 && (crm == 6 || crm == 10 || crm == 14);
				if (mva || sw)
					qemu_plugin_register_vcpu_insn_exec_cb(insn, mcr, QEMU_PLUGIN_CB_NO_REGS,
					                                       (void *)(uintptr_t)(crm | opc2 << 4 | r << 8));
			}
		}
		/* LDR Rt, [SP, #imm] (ARM ARM A8.8.63, encoding A1): a
		 * word loaded from the stack, for the PL310 store values. */
		uintptr_t spload = 0;
		if (qemu_plugin_insn_size(insn) == 4) {
			uint32_t w;
			memcpy(&w, qemu_plugin_insn_data(insn), 4);
			if ((w & 0x0E500000) == 0x04100000 && ((w >> 16) & 15) == 13) spload = 0x100;
		}
		qemu_plugin_register_vcpu_mem_cb(insn, mem, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, (void *)((uintptr_t)r | spload));
	}
}

static void *watch(void *arg) {
	char tmp[700];
	(void)arg;
	snprintf(tmp, sizeof tmp, "%s.tmp", out);
	for (;;) {
		usleep(20000);
		if (access(req, F_OK) != 0) continue;
		FILE *f = fopen(tmp, "w");
		if (f == NULL) continue;
		uint64_t now[NCOUNT];
		pthread_mutex_lock(&mu);
		memcpy(now, model.c, sizeof now);
		print_counters(f, "", now);
		for (int k = 0; k < nsnaps; k++) {
			char p[16];
			snprintf(p, sizeof p, "M%d ", k);
			print_counters(f, p, snaps[k]);
		}
		pthread_mutex_unlock(&mu);
		fclose(f);
		rename(tmp, out);
		unlink(req);
	}
	return NULL;
}

static int parse_range(const char *s, uint64_t *lo, uint64_t *hi) {
	char *e;
	*lo = strtoull(s, &e, 0);
	if (*e != '-') return -1;
	*hi = strtoull(e + 1, &e, 0);
	return *e == 0 && *hi > *lo ? 0 : -1;
}

static int parse_ram(const char *spec) {
	const char *at = strrchr(spec, '@');
	if (at == NULL || (size_t)(at - spec) >= sizeof rampath) return -1;
	memcpy(rampath, spec, at - spec);
	rampath[at - spec] = 0;
	rambase = strtoull(at + 1, NULL, 0);
	return 0;
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
	(void)info;
	int have1 = 0, have2 = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strncmp(a, "out=", 4)) {
			snprintf(out, sizeof out, "%s", a + 4);
		} else if (!strncmp(a, "l1=", 3)) {
			if (parse_cache(&model.l1, a + 3)) return -1;
			have1 = 1;
		} else if (!strncmp(a, "l2=", 3)) {
			if (parse_cache(&model.l2, a + 3)) return -1;
			have2 = 1;
		} else if (!strncmp(a, "outer=", 6)) {
			model.outer = atoi(a + 6) != 0;
		} else if (!strncmp(a, "wa=", 3)) {
			model.wa = atoi(a + 3) != 0;
		} else if (!strncmp(a, "wb=", 3) && nwb < MAXRANGES) {
			if (parse_range(a + 3, &wblo[nwb], &wbhi[nwb])) return -1;
			nwb++;
		} else if (!strncmp(a, "io=", 3) && nio < MAXRANGES) {
			if (parse_range(a + 3, &iolo[nio], &iohi[nio])) return -1;
			nio++;
		} else if (!strncmp(a, "ram=", 4)) {
			if (parse_ram(a + 4)) return -1;
		} else if (!strncmp(a, "mva=", 4) && nroutines < MAXRANGES) {
			const char *at = strchr(a + 4, '@');
			if (at == NULL) return -1;
			size_t k = at - (a + 4);
			int kind = !strncmp(a + 4, "clean", k) && k == 5      ? R_CLEAN
			           : !strncmp(a + 4, "inv", k) && k == 3      ? R_INV
			           : !strncmp(a + 4, "cleaninv", k) && k == 8 ? R_CLEANINV
			           : !strncmp(a + 4, "invrange", k) && k == 8 ? R_INVRANGE
			                                                      : -1;
			if (kind < 0 || parse_range(at + 1, &rlo[nroutines], &rhi[nroutines])) return -1;
			rkind[nroutines++] = kind;
		} else if (!strncmp(a, "pl310=", 6)) {
			pl310 = strtoull(a + 6, NULL, 0);
		} else if (!strncmp(a, "pl310mirror=", 12)) {
			mirror = atoi(a + 12) != 0;
		} else if (!strncmp(a, "mark=", 5) && nmarkaddrs < MAXRANGES) {
			marks[nmarkaddrs++] = strtoull(a + 5, NULL, 0);
		} else {
			fprintf(stderr, "cachemodel: unknown argument, or more than %d of its kind: %s\n", MAXRANGES, a);
			return -1;
		}
	}
	if (out[0] == 0 || !have1 || !have2 || (nroutines && rampath[0] == 0)) {
		fprintf(stderr, "cachemodel: want out=, l1=, l2= (and ram= with mva=)\n");
		return -1;
	}
	snprintf(req, sizeof req, "%s.req", out);
	qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
	pthread_t t;
	return pthread_create(&t, NULL, watch, NULL) == 0 ? 0 : -1;
}
#endif
