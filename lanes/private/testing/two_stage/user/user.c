#include <stdio.h>
#include "greet.h"

int main(void) {
    printf("user of %s\n", greeting());
    return 0;
}
