/*
 * nwaccess: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) that
 * records every load and store a chosen piece of guest code makes to a
 * denied physical range. QEMU 7.2 enforces neither the i.MX6UL/ULL CSU nor
 * its TZASC, so a Normal World access that silicon would refuse goes
 * through unnoticed under emulation; this plugin notices it. Exact: every
 * access of every instrumented instruction is checked, none is sampled.
 *
 * Arguments (key=value, comma separated on the -plugin option):
 *   out=FILE              the report (below); written when FILE.req appears
 *                         (FILE.req is then removed) and when QEMU exits
 *   code=WORLD:LO-HI      instructions whose virtual address is in [LO, HI)
 *                         belong to WORLD (a label: nw, sw); their loads
 *                         and stores are checked. Repeatable (at most 8).
 *   deny=MODE:LO-HI:NAME[@WORLD]  the physical range [LO, HI), named
 *                         NAME (no comma, space or @), denies MODE: r
 *                         (reads), w (writes) or rw (both), to every world
 *                         or, with @WORLD, to that one only. Repeatable
 *                         (at most 64); ranges may overlap: an access is
 *                         recorded once per range it touches.
 *
 * The physical address of an access is qemu_plugin_hwaddr_phys_addr's.
 * QEMU 7.2 (plugins/api.c) computes it as block->offset + offset +
 * mr->addr for RAM (right only for the first RAM block, the DDR: on
 * mcimx6ul-evk a store to OCRAM at 0x00900000 comes back as 0x20930000,
 * TestAccessPluginRecords) and as the section's address plus
 * the offset in the memory region for devices (right only when the section
 * starts at the region's start); TamaGo maps every address flat (virtual ==
 * physical, and the early start-up runs with the MMU off). So where the
 * two differ the access is counted (pa_mismatch, the first one kept) and
 * checked at both addresses: the check can only be stricter, never miss
 * one. An access with no hwaddr (the TLB entry already replaced) is checked at its
 * virtual address and counted (no_hwaddr).
 *
 * Report: one line per distinct (world, pc, range, direction, address):
 *   V world=W pc=0x... range=NAME dir=r|w pa=0x... size=N (the first
 *     access's) io=0|1 dev=NAME count=N via=0x...,0x...
 * The address (the access's word: pa with its low two bits clear) is part
 * of the key because Go reaches registers through shared helpers (TamaGo's
 * reg.SetN ends in one atomic store for every register): by pc alone, one
 * line would stand for every register written.
 *
 * via lists, most recent first, the last unconditional branch-and-link
 * instructions (BL, BLX) the world executed before the first access: the
 * calls that led to it (QEMU 7.2's plugin API shows no registers, so the
 * stack cannot be walked; a call that has since returned can also appear,
 * so read it as a trail, not a stack).
 *
 * Then, per world:
 *   T world=W loads=N stores=N io_loads=N io_stores=N violations=N
 *     no_hwaddr=N pa_mismatch=N mismatch_pc=0x... mismatch_va=0x...
 *     mismatch_pa=0x...
 * and "E records=N dropped=N" (dropped: distinct records past the table's
 * size, whose accesses are still in violations).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The QEMU 7.2 plugin API functions used, as include/qemu/qemu-plugin.h
 * (QEMU_PLUGIN_VERSION 1) declares them. */
typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_plugin_hwaddr;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
extern void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *), void *userdata);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
extern uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
extern const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
extern size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
extern void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, void (*cb)(unsigned int, void *), enum qemu_plugin_cb_flags flags, void *userdata);
extern void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, void (*cb)(unsigned int, qemu_plugin_meminfo_t, uint64_t, void *), enum qemu_plugin_cb_flags flags, enum qemu_plugin_mem_rw rw, void *userdata);
extern unsigned int qemu_plugin_mem_size_shift(qemu_plugin_meminfo_t info);
extern bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t info);
extern struct qemu_plugin_hwaddr *qemu_plugin_get_hwaddr(qemu_plugin_meminfo_t info, uint64_t vaddr);
extern bool qemu_plugin_hwaddr_is_io(const struct qemu_plugin_hwaddr *haddr);
extern uint64_t qemu_plugin_hwaddr_phys_addr(const struct qemu_plugin_hwaddr *haddr);
extern const char *qemu_plugin_hwaddr_device_name(const struct qemu_plugin_hwaddr *h);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define MAXWORLDS 8
#define MAXRANGES 64
#define TABLE 4096 /* distinct records kept */
#define VIA 6       /* branch-and-link sites kept per world */

enum { DENY_R = 1, DENY_W = 2 };

static struct world {
	char name[16];
	uint64_t lo, hi;
	uint64_t loads, stores, io_loads, io_stores, violations, no_hwaddr, pa_mismatch;
	uint64_t mm_pc, mm_va, mm_pa;
	uint64_t via[VIA]; /* ring of the last BL/BLX pcs */
	unsigned nvia;
} worlds[MAXWORLDS];
static int nworlds;

static struct range {
	char name[64];
	uint64_t lo, hi;
	int deny;
	int world; /* the world it applies to, or -1: all */
} ranges[MAXRANGES];
static int nranges;

static struct record {
	bool used;
	int world, range, store;
	uint64_t pc, pa, count;
	unsigned size;
	bool io;
	const char *dev; /* interned by QEMU: lives as long as it */
	uint64_t via[VIA]; /* most recent first; 0: none */
} records[TABLE];
static uint64_t nrecords, dropped;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char out[512], req[600];

/* record adds one access to its (world, pc, range, direction, word) record. Called
 * with mu held. */
static void record(int w, uint64_t pc, int r, bool st, uint64_t pa, unsigned size, bool io, const char *dev) {
	uint64_t word = pa & ~3ull;
	uint64_t key = pc * 0x9E3779B97F4A7C15ull ^ (uint64_t)(r * 2 + st) * 0xC2B2AE3D27D4EB4Full ^ (uint64_t)w ^
	               word * 0x165667B19E3779F9ull;
	for (uint64_t i = 0; i < TABLE; i++) {
		struct record *e = &records[(key + i) & (TABLE - 1)];
		if (!e->used) {
			*e = (struct record){.used = true, .world = w, .range = r, .store = st, .pc = pc, .pa = pa,
			                     .count = 1, .size = size, .io = io, .dev = dev};
			for (unsigned k = 0; k < VIA && k < worlds[w].nvia; k++)
				e->via[k] = worlds[w].via[(worlds[w].nvia - 1 - k) % VIA];
			nrecords++;
			return;
		}
		if (e->world == w && e->pc == pc && e->range == r && e->store == st && (e->pa & ~3ull) == word) {
			e->count++;
			return;
		}
	}
	dropped++;
}

/* check records the access [a, a+size) against every denied range but
 * those in skip (a bit per range), and returns the ranges it touched. */
static uint64_t check(int w, uint64_t pc, uint64_t a, unsigned size, bool st, bool io, const char *dev, uint64_t skip) {
	int need = st ? DENY_W : DENY_R;
	uint64_t hit = 0;
	for (int r = 0; r < nranges; r++) {
		if (!(ranges[r].deny & need) || (ranges[r].world >= 0 && ranges[r].world != w) || a + size <= ranges[r].lo ||
		    a >= ranges[r].hi || (skip >> r & 1))
			continue;
		hit |= 1ull << r;
		pthread_mutex_lock(&mu);
		worlds[w].violations++;
		record(w, pc, r, st, a, size, io, dev);
		pthread_mutex_unlock(&mu);
	}
	return hit;
}

/* mem runs after every load and store of an instrumented instruction; ud
 * is the instruction's pc | world index << 32 (guest addresses are 32-bit,
 * the host's pointers 64-bit: see qemu_plugin_install). */
static void mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *ud) {
	(void)vcpu;
	uint64_t pc = (uintptr_t)ud & 0xffffffffu;
	int wi = (int)((uintptr_t)ud >> 32);
	struct world *w = &worlds[wi];
	bool st = qemu_plugin_mem_is_store(info);
	unsigned size = 1u << qemu_plugin_mem_size_shift(info);
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
	uint64_t pa = vaddr;
	bool io = false;
	const char *dev = "";
	if (hw == NULL) {
		w->no_hwaddr++;
	} else {
		pa = qemu_plugin_hwaddr_phys_addr(hw);
		io = qemu_plugin_hwaddr_is_io(hw);
		if (io) dev = qemu_plugin_hwaddr_device_name(hw);
	}
	if (st) {
		w->stores++;
		if (io) w->io_stores++;
	} else {
		w->loads++;
		if (io) w->io_loads++;
	}
	uint64_t hit = check(wi, pc, pa, size, st, io, dev, 0);
	if (pa != vaddr) {
		if (w->pa_mismatch++ == 0) {
			w->mm_pc = pc;
			w->mm_va = vaddr;
			w->mm_pa = pa;
		}
		check(wi, pc, vaddr, size, st, io, dev, hit);
	}
}

/* called runs before every unconditional BL/BLX of a watched world; ud as
 * for mem. */
static void called(unsigned int vcpu, void *ud) {
	(void)vcpu;
	struct world *w = &worlds[(uintptr_t)ud >> 32];
	w->via[w->nvia++ % VIA] = (uintptr_t)ud & 0xffffffffu;
}

/* is_call: an A32 BL or BLX that always executes (ARM ARM A8.8.25: BL
 * imm cond 1011, BLX imm 1111 101H, BLX reg cond 0001 0010 1111 1111 1111
 * 0011 Rm). Conditional ones are left out: Go's every prologue has a
 * BL.LS to runtime.morestack, rarely taken, which would drown the trail. */
static bool is_call(uint32_t w) {
	if ((w & 0xFE000000) == 0xFA000000) return true;
	if (w >> 28 != 0xE) return false;
	return (w & 0x0F000000) == 0x0B000000 || (w & 0x0FFFFFF0) == 0x012FFF30;
}

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
	(void)id;
	size_t n = qemu_plugin_tb_n_insns(tb);
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint64_t pc = qemu_plugin_insn_vaddr(insn);
		for (int w = 0; w < nworlds; w++) {
			if (pc < worlds[w].lo || pc >= worlds[w].hi) continue;
			void *ud = (void *)(uintptr_t)(pc | (uint64_t)w << 32);
			qemu_plugin_register_vcpu_mem_cb(insn, mem, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, ud);
			if (qemu_plugin_insn_size(insn) == 4) {
				uint32_t word;
				memcpy(&word, qemu_plugin_insn_data(insn), 4);
				if (is_call(word)) qemu_plugin_register_vcpu_insn_exec_cb(insn, called, QEMU_PLUGIN_CB_NO_REGS, ud);
			}
			break;
		}
	}
}

static void dump(void) {
	char tmp[700];
	snprintf(tmp, sizeof tmp, "%s.tmp", out);
	FILE *f = fopen(tmp, "w");
	if (f == NULL) return;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < TABLE; i++) {
		struct record *e = &records[i];
		if (!e->used) continue;
		fprintf(f, "V world=%s pc=%#llx range=%s dir=%c pa=%#llx size=%u io=%d dev=%s count=%llu via=",
		        worlds[e->world].name, (unsigned long long)e->pc, ranges[e->range].name, e->store ? 'w' : 'r',
		        (unsigned long long)e->pa, e->size, e->io, e->dev[0] ? e->dev : "-", (unsigned long long)e->count);
		for (int k = 0; k < VIA && e->via[k]; k++) fprintf(f, "%s%#llx", k ? "," : "", (unsigned long long)e->via[k]);
		fprintf(f, "%s\n", e->via[0] ? "" : "-");
	}
	for (int w = 0; w < nworlds; w++) {
		struct world *x = &worlds[w];
		fprintf(f, "T world=%s loads=%llu stores=%llu io_loads=%llu io_stores=%llu violations=%llu no_hwaddr=%llu "
		           "pa_mismatch=%llu mismatch_pc=%#llx mismatch_va=%#llx mismatch_pa=%#llx\n",
		        x->name, (unsigned long long)x->loads, (unsigned long long)x->stores, (unsigned long long)x->io_loads,
		        (unsigned long long)x->io_stores, (unsigned long long)x->violations, (unsigned long long)x->no_hwaddr,
		        (unsigned long long)x->pa_mismatch, (unsigned long long)x->mm_pc, (unsigned long long)x->mm_va,
		        (unsigned long long)x->mm_pa);
	}
	fprintf(f, "E records=%llu dropped=%llu\n", (unsigned long long)nrecords, (unsigned long long)dropped);
	pthread_mutex_unlock(&mu);
	fclose(f);
	rename(tmp, out);
}

static void *watch(void *arg) {
	(void)arg;
	for (;;) {
		usleep(20000);
		if (access(req, F_OK) != 0) continue;
		dump();
		unlink(req);
	}
	return NULL;
}

static void atexit_dump(qemu_plugin_id_t id, void *p) {
	(void)id;
	(void)p;
	dump();
}

/* parse_range reads LO-HI (C integer syntax) up to end, wanting HI > LO. */
static int parse_range(const char *s, const char *end, uint64_t *lo, uint64_t *hi) {
	char *e;
	*lo = strtoull(s, &e, 0);
	if (*e != '-') return -1;
	*hi = strtoull(e + 1, &e, 0);
	return e == end && *hi > *lo ? 0 : -1;
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
	(void)info;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strncmp(a, "out=", 4)) {
			snprintf(out, sizeof out, "%s", a + 4);
		} else if (!strncmp(a, "code=", 5) && nworlds < MAXWORLDS) {
			const char *c = strchr(a + 5, ':');
			struct world *w = &worlds[nworlds];
			if (c == NULL || c == a + 5 || (size_t)(c - (a + 5)) >= sizeof w->name ||
			    parse_range(c + 1, c + 1 + strlen(c + 1), &w->lo, &w->hi))
				goto bad;
			memcpy(w->name, a + 5, c - (a + 5));
			nworlds++;
		} else if (!strncmp(a, "deny=", 5) && nranges < MAXRANGES) {
			struct range *r = &ranges[nranges];
			const char *m = a + 5, *c1 = strchr(m, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
			if (c2 == NULL) goto bad;
			size_t ml = c1 - m;
			r->deny = ml == 1 && m[0] == 'r' ? DENY_R : ml == 1 && m[0] == 'w' ? DENY_W : ml == 2 && !strncmp(m, "rw", 2) ? DENY_R | DENY_W : 0;
			const char *nm = c2 + 1, *at = strchr(nm, '@');
			size_t nl = at ? (size_t)(at - nm) : strlen(nm);
			if (r->deny == 0 || parse_range(c1 + 1, c2, &r->lo, &r->hi) || nl == 0 || nl >= sizeof r->name ||
			    strpbrk(nm, " \t\n"))
				goto bad;
			memcpy(r->name, nm, nl);
			r->world = -1;
			if (at != NULL) {
				for (int w = 0; w < nworlds; w++)
					if (!strcmp(worlds[w].name, at + 1)) r->world = w;
				if (r->world < 0) goto bad; /* code=WORLD must come first */
			}
			nranges++;
		} else {
			goto bad;
		}
		continue;
	bad:
		fprintf(stderr, "nwaccess: bad argument, or more than %d code= / %d deny=: %s\n", MAXWORLDS, MAXRANGES, a);
		return -1;
	}
	if (sizeof(void *) < 8) {
		fprintf(stderr, "nwaccess: needs a 64-bit host\n");
		return -1;
	}
	for (int w = 0; w < nworlds; w++) {
		if (worlds[w].hi > 1ull << 32) {
			fprintf(stderr, "nwaccess: code range past 4 GiB (a 32-bit guest's)\n");
			return -1;
		}
	}
	if (out[0] == 0 || nworlds == 0 || nranges == 0) {
		fprintf(stderr, "nwaccess: want out=, at least one code= and one deny=\n");
		return -1;
	}
	snprintf(req, sizeof req, "%s.req", out);
	qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
	qemu_plugin_register_atexit_cb(id, atexit_dump, NULL);
	pthread_t t;
	return pthread_create(&t, NULL, watch, NULL) == 0 ? 0 : -1;
}
