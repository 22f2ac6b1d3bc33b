dptrain-params 1
conv1.weight 20 1 3 3
