/*
 * icprof: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) for
 * tamanic-cost. It counts the guest instructions executed, by the start
 * address of each translation block (an inline add of the block's
 * instruction count on every execution), and, for the address ranges given
 * as entry=LO-HI arguments, the calls into them by the block executed just
 * before (the caller: a branch-and-link ends a block). When the file
 * OUT.req appears (out=OUT), a watcher thread writes every counter to OUT
 * ("ADDR COUNT" lines, and "E CALLER<<32|CALLEE COUNT" for calls) and
 * removes OUT.req. One vCPU is assumed (the i.MX6UL boards).
 *
 * The declarations below are the few QEMU plugin API functions used, as
 * QEMU 7.2's include/qemu/qemu-plugin.h declares them.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
extern void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr, uint64_t imm);
extern void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, void (*cb)(unsigned int, void *), enum qemu_plugin_cb_flags flags, void *userdata);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define TABLE (1 << 20) /* open-addressing hash tables, never resized */
#define MAXRANGES 64

struct counter {
	uint64_t key; /* 0: free */
	uint64_t count;
};

static struct counter *blocks, *calls;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char out[512], req[600];
static int nranges;
static uint64_t lo[MAXRANGES], hi[MAXRANGES];
static uint64_t last; /* start of the block executed last */

struct block {
	uint64_t pc;
	int range; /* 1 + index of the entry range it lies in, or 0 */
};

/* get returns the counter of key (non-zero), adding it. Called with mu. */
static struct counter *get(struct counter *t, uint64_t key) {
	uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 44;
	for (;;) {
		struct counter *c = &t[h & (TABLE - 1)];
		if (c->key == key) return c;
		if (c->key == 0) {
			c->key = key;
			return c;
		}
		h++;
	}
}

static void executed(unsigned int vcpu, void *u) {
	struct block *b = u;
	(void)vcpu;
	if (b->range && !(last >= lo[b->range - 1] && last < hi[b->range - 1])) {
		pthread_mutex_lock(&mu);
		get(calls, (last & 0xFFFFFFFFu) << 32 | (b->pc & 0xFFFFFFFFu))->count++;
		pthread_mutex_unlock(&mu);
	}
	last = b->pc;
}

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
	uint64_t pc = qemu_plugin_tb_vaddr(tb);
	(void)id;
	pthread_mutex_lock(&mu);
	struct counter *c = get(blocks, pc | 1ull << 63); /* the tag keeps pc 0 apart from "free" */
	pthread_mutex_unlock(&mu);
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &c->count, qemu_plugin_tb_n_insns(tb));
	if (nranges) {
		struct block *b = malloc(sizeof *b);
		b->pc = pc;
		b->range = 0;
		for (int i = 0; i < nranges; i++)
			if (pc >= lo[i] && pc < hi[i]) b->range = 1 + i;
		qemu_plugin_register_vcpu_tb_exec_cb(tb, executed, QEMU_PLUGIN_CB_NO_REGS, b);
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
		pthread_mutex_lock(&mu);
		for (size_t i = 0; i < TABLE; i++)
			if (blocks[i].key && blocks[i].count)
				fprintf(f, "%llx %llu\n", (unsigned long long)(blocks[i].key & ~(1ull << 63)), (unsigned long long)blocks[i].count);
		for (size_t i = 0; calls && i < TABLE; i++)
			if (calls[i].key && calls[i].count)
				fprintf(f, "E %llx %llu\n", (unsigned long long)calls[i].key, (unsigned long long)calls[i].count);
		pthread_mutex_unlock(&mu);
		fclose(f);
		rename(tmp, out);
		unlink(req);
	}
	return NULL;
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
	(void)info;
	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "out=", 4)) {
			snprintf(out, sizeof out, "%s", argv[i] + 4);
		} else if (!strncmp(argv[i], "entry=", 6) && nranges < MAXRANGES) {
			char *e;
			lo[nranges] = strtoull(argv[i] + 6, &e, 0);
			if (*e != '-') return -1;
			hi[nranges++] = strtoull(e + 1, NULL, 0);
		} else {
			return -1;
		}
	}
	if (out[0] == 0) return -1;
	snprintf(req, sizeof req, "%s.req", out);
	blocks = calloc(TABLE, sizeof *blocks);
	if (nranges) calls = calloc(TABLE, sizeof *calls);
	if (blocks == NULL || (nranges && calls == NULL)) return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
	pthread_t t;
	return pthread_create(&t, NULL, watch, NULL) == 0 ? 0 : -1;
}
