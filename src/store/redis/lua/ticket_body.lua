-- Read one ticket (after housekeeping). ARGV[5] ticket key, ARGV[6] 'sweep' to also drop
-- zero counts. Returns its view or false.
housekeeping(ARGV[6] == 'sweep')
return view(ARGV[5])
