#include <stdio.h>
#include "greet.h"

int main(void) {
    printf("hello from %s\n", greeting());
    return 0;
}
