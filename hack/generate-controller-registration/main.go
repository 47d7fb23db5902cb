// Command generate-controller-registration writes example/controller-registration.yaml from the chart.
package main

import (
	"fmt"
	"os"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
)

func main() {
	out, err := charts.ControllerRegistration()
	if err == nil {
		err = os.WriteFile("example/controller-registration.yaml", out, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
