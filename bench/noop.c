/* The floor under gpu-mknod: a static program that does nothing, timed as a
 * whole process the same way (bench_mknod). */
int main(void) {
    return 0;
}
