/* The cost of the verbs a device executor makes for each checked step, called from C
 * against libibverbs: what a C executor would pay where the Python one pays pyverbs
 * (qpconform/vm/verbs_cost.py runs both in the guest and puts them side by side; issue 25 item 1).
 *
 *   verbs_cost DEVICE SECONDS QUERY_MASK
 *
 * One RC QP on its own PD and CQ; each loop runs SECONDS and prints microseconds a call,
 * as one JSON object: modify (RESET->INIT and INIT->RESET alternately), query (ibv_query_qp
 * with the executor's mask), poll (an empty CQ, 16 entries asked, as the executor polls),
 * create_destroy (one ibv_create_qp plus ibv_destroy_qp). Exit 1 with a message on any
 * failure; everything is freed on every path.
 */
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEPTH 16

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "verbs_cost: %s failed: %s\n", what, strerror(err ? err : errno));
	return 1;
}

struct bench {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr init;
};

static int modify_pair(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	int err = ibv_modify_qp(qp, &attr,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

	if (err)
		return err;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RESET;
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

static int run(struct bench *b, double seconds, int mask)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init_out;
	struct ibv_wc wc[DEPTH];
	double start, took[4];
	long calls[4] = { 0 };
	int err;

	start = now();
	while (now() - start < seconds) {
		err = modify_pair(b->qp);
		if (err)
			return fail("ibv_modify_qp", err);
		calls[0] += 2;
	}
	took[0] = now() - start;
	start = now();
	while (now() - start < seconds) {
		err = ibv_query_qp(b->qp, &attr, mask, &init_out);
		if (err)
			return fail("ibv_query_qp", err);
		calls[1]++;
	}
	took[1] = now() - start;
	start = now();
	while (now() - start < seconds) {
		if (ibv_poll_cq(b->cq, DEPTH, wc) < 0)
			return fail("ibv_poll_cq", EIO);
		calls[2]++;
	}
	took[2] = now() - start;
	start = now();
	while (now() - start < seconds) {
		struct ibv_qp *qp = ibv_create_qp(b->pd, &b->init);

		if (!qp)
			return fail("ibv_create_qp", 0);
		err = ibv_destroy_qp(qp);
		if (err)
			return fail("ibv_destroy_qp", err);
		calls[3]++;
	}
	took[3] = now() - start;
	printf("{\"modify\": %.3f, \"query\": %.3f, \"poll\": %.3f, \"create_destroy\": %.3f}\n",
	       1e6 * took[0] / calls[0], 1e6 * took[1] / calls[1], 1e6 * took[2] / calls[2],
	       1e6 * took[3] / calls[3]);
	return 0;
}

static struct ibv_context *open_named(const char *name)
{
	struct ibv_context *ctx = NULL;
	struct ibv_device **list;
	int n, i;

	list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

int main(int argc, char **argv)
{
	struct bench b = { 0 };
	int status = 1;

	if (argc != 4) {
		fprintf(stderr, "usage: verbs_cost DEVICE SECONDS QUERY_MASK\n");
		return 2;
	}
	b.ctx = open_named(argv[1]);
	if (!b.ctx) {
		fprintf(stderr, "verbs_cost: no device %s to open\n", argv[1]);
		return 1;
	}
	b.pd = ibv_alloc_pd(b.ctx);
	b.cq = b.pd ? ibv_create_cq(b.ctx, DEPTH, NULL, NULL, 0) : NULL;
	b.init.send_cq = b.init.recv_cq = b.cq;
	b.init.qp_type = IBV_QPT_RC;
	b.init.cap.max_send_wr = b.init.cap.max_recv_wr = DEPTH;
	b.init.cap.max_send_sge = b.init.cap.max_recv_sge = 1;
	b.qp = b.cq ? ibv_create_qp(b.pd, &b.init) : NULL;
	if (!b.qp)
		fail("creating the PD, CQ and QP", 0);
	else
		status = run(&b, atof(argv[2]), atoi(argv[3]));
	if (b.qp)
		ibv_destroy_qp(b.qp);
	if (b.cq)
		ibv_destroy_cq(b.cq);
	if (b.pd)
		ibv_dealloc_pd(b.pd);
	ibv_close_device(b.ctx);
	return status;
}
