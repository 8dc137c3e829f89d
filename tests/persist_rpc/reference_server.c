/*
 * A persistence RPC server on libtirpc, set up as nvidia-persistenced sets
 * up its own (NVIDIA/nvidia-persistenced 595.71.05, nvidia-persistenced.c
 * setup_rpc(): svcunix_create() on the socket, versions 1 and 2 registered
 * with rpcgen's dispatch, svc_run()), serving a daemon with no GPU: each
 * procedure answers as command_server.c does when get_device() finds
 * nothing (the three sets ask for uid 0 first). The tests send it and
 * gpu-persist the same bytes, naming a device neither knows, and compare
 * the replies: the RPC layer (record marking, credentials, program,
 * version, procedure, argument decoding) must be libtirpc's.
 *
 * Usage: reference_server SOCKET
 */
#define _GNU_SOURCE /* struct ucred */
#include "nvpd_protocol.h"

#include <rpc/pmap_clnt.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

void nvpd_persistence_program_1(struct svc_req* request, SVCXPRT* transport);
void nvpd_persistence_program_2(struct svc_req* request, SVCXPRT* transport);

static nvpd_status root_or(struct svc_req* request, nvpd_status otherwise) {
    struct ucred peer = {-1, (uid_t)-1, (gid_t)-1};
    socklen_t length = sizeof(peer);
    if (getsockopt(request->rq_xprt->xp_fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) < 0) {
        return NVPD_STATUS_UNKNOWN;
    }
    return peer.uid == 0 ? otherwise : NVPD_STATUS_PERMISSIONS;
}

nvpd_status* nvpd_set_persistence_mode_1_svc(nvpd_set_mode_args* args, struct svc_req* request) {
    static nvpd_status result;
    (void)args;
    result = root_or(request, NVPD_STATUS_DEVICE_NOT_FOUND);
    return &result;
}

nvpd_get_mode_result* nvpd_get_persistence_mode_1_svc(nvpd_get_mode_args* args,
                                                      struct svc_req* request) {
    static nvpd_get_mode_result result;
    (void)args;
    (void)request;
    result.status = NVPD_STATUS_DEVICE_NOT_FOUND;
    return &result;
}

nvpd_status* nvpd_set_persistence_mode_only_2_svc(nvpd_set_mode_args* args,
                                                  struct svc_req* request) {
    static nvpd_status result;
    (void)args;
    result = root_or(request, NVPD_STATUS_DEVICE_NOT_FOUND);
    return &result;
}

nvpd_status* nvpd_set_numa_status_2_svc(nvpd_set_numa_args* args, struct svc_req* request) {
    static nvpd_status result;
    (void)args;
    result = root_or(request, NVPD_STATUS_DEVICE_NOT_FOUND);
    return &result;
}

int nvpd_persistence_program_1_freeresult(SVCXPRT* transport, xdrproc_t xdr, caddr_t result) {
    (void)transport;
    xdr_free(xdr, result);
    return 1;
}

int nvpd_persistence_program_2_freeresult(SVCXPRT* transport, xdrproc_t xdr, caddr_t result) {
    (void)transport;
    xdr_free(xdr, result);
    return 1;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
        return 2;
    }
    (void)unlink(argv[1]);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    SVCXPRT* transport = fd < 0 ? NULL : svcunix_create(fd, 0, 0, argv[1]);
    if (transport == NULL ||
        !svc_register(transport, NVPD_PERSISTENCE_PROGRAM, NVPD_PERSISTENCE_V1,
                      nvpd_persistence_program_1, 0) ||
        !svc_register(transport, NVPD_PERSISTENCE_PROGRAM, NVPD_PERSISTENCE_V2,
                      nvpd_persistence_program_2, 0)) {
        fprintf(stderr, "reference_server: cannot serve on %s\n", argv[1]);
        return 1;
    }
    svc_run();
    return 1;
}
