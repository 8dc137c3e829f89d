// SPDX-License-Identifier: GPL-2.0
/*
 * nvidia-probe: the guest's client for the calls busybox cannot make on a
 * GPU node, so the vm-driver scenarios can check the stand-in's answers.
 * The harness builds it statically into the guest's /usr/local/bin.
 *
 *   nvidia-probe [-n] PATH [STEP...]
 *
 * opens PATH read-write (-n: with O_NONBLOCK), prints "open: ok" or
 * "open: ERRNO" (then exits 1), and runs each STEP in order, one line each:
 *   wait      NV_ESC_WAIT_OPEN_COMPLETE      "wait: rc=N" or "wait: ERRNO"
 *   ioctl=NR  _IOWR('F', NR, 8 bytes)         "ioctl NR: ok" or "ioctl NR: ERRNO"
 *   poll=MS   poll() with POLLIN|POLLPRI|POLLOUT and MS ms: "poll: none" or
 *             the events ("poll: HUP ERR"); "poll: ERRNO" when it fails
 *   epoll=MS  the same through epoll (added, then epoll_wait)
 *   sleep=MS  sleeps MS ms
 *   hold      waits for a signal (the file stays open until it comes)
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

struct wait_open_complete {
	int rc;
	uint32_t adapter_status;
};

static const char *errno_name(int code)
{
	static const struct {
		int code;
		const char *name;
	} names[] = {
		{ EPERM, "EPERM" }, { ENOENT, "ENOENT" }, { EINTR, "EINTR" },
		{ EIO, "EIO" },	    { ENXIO, "ENXIO" },	  { EAGAIN, "EAGAIN" },
		{ EFAULT, "EFAULT" }, { EBUSY, "EBUSY" }, { ENODEV, "ENODEV" },
		{ EINVAL, "EINVAL" }, { ENOTTY, "ENOTTY" }, { EACCES, "EACCES" },
	};
	static char other[16];
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].code == code)
			return names[i].name;
	snprintf(other, sizeof(other), "errno %d", code);
	return other;
}

static void print_events(const char *what, int ready, unsigned int events)
{
	if (ready < 0) {
		printf("%s: %s\n", what, errno_name(errno));
		return;
	}
	if (ready == 0) {
		printf("%s: none\n", what);
		return;
	}
	printf("%s:%s%s%s%s%s\n", what, (events & POLLIN) ? " IN" : "",
	       (events & POLLPRI) ? " PRI" : "", (events & POLLOUT) ? " OUT" : "",
	       (events & POLLHUP) ? " HUP" : "", (events & POLLERR) ? " ERR" : "");
}

static void on_signal(int signal)
{
	(void)signal;
}

int main(int argc, char **argv)
{
	int flags = O_RDWR | O_CLOEXEC;
	int arg = 1, fd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (arg < argc && strcmp(argv[arg], "-n") == 0) {
		flags |= O_NONBLOCK;
		arg++;
	}
	if (arg >= argc) {
		fprintf(stderr, "usage: nvidia-probe [-n] PATH [STEP...]\n");
		return 2;
	}
	fd = open(argv[arg], flags);
	if (fd < 0) {
		printf("open: %s\n", errno_name(errno));
		return 1;
	}
	printf("open: ok\n");
	for (arg++; arg < argc; arg++) {
		const char *step = argv[arg];
		const char *value = strchr(step, '=');
		long number = value ? strtol(value + 1, NULL, 10) : 0;

		if (strcmp(step, "wait") == 0) {
			struct wait_open_complete result = { -12345, 0 };

			if (ioctl(fd, _IOWR('F', 218, struct wait_open_complete), &result) != 0)
				printf("wait: %s\n", errno_name(errno));
			else
				printf("wait: rc=%d\n", result.rc);
		} else if (strncmp(step, "ioctl=", 6) == 0) {
			struct wait_open_complete buffer = { 0, 0 };

			if (ioctl(fd, _IOWR('F', number, struct wait_open_complete), &buffer) != 0)
				printf("ioctl %ld: %s\n", number, errno_name(errno));
			else
				printf("ioctl %ld: ok\n", number);
		} else if (strncmp(step, "poll=", 5) == 0) {
			struct pollfd entry = { fd, POLLIN | POLLPRI | POLLOUT, 0 };
			int ready = poll(&entry, 1, (int)number);

			print_events("poll", ready, (unsigned int)entry.revents);
		} else if (strncmp(step, "epoll=", 6) == 0) {
			struct epoll_event event = { EPOLLIN | EPOLLPRI | EPOLLOUT, { 0 } };
			int epoll = epoll_create1(EPOLL_CLOEXEC);
			int ready = -1;

			if (epoll >= 0 && epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) == 0)
				ready = epoll_wait(epoll, &event, 1, (int)number);
			print_events("epoll", ready, event.events);
			if (epoll >= 0)
				close(epoll);
		} else if (strncmp(step, "sleep=", 6) == 0) {
			struct timespec pause_for = { number / 1000, (number % 1000) * 1000000 };

			nanosleep(&pause_for, NULL);
		} else if (strcmp(step, "hold") == 0) {
			signal(SIGTERM, on_signal);
			pause();
		} else {
			fprintf(stderr, "nvidia-probe: unknown step '%s'\n", step);
			return 2;
		}
	}
	close(fd);
	return 0;
}
